"""Train the Calc-X agent with RL: Agent Lightning's ``examples/calc_x/train_calc_agent.py``, ported to agl-stream.

    python train_calc_agent.py                          # SmolLM2-135M on the CPU: GRPO, 6 min budget, eval before/after
    python train_calc_agent.py --model tiny --steps 1   # smoke run: agl-stream's random tiny model, one learner step
    python train_calc_agent.py --model Qwen/Qwen2.5-1.5B-Instruct   # upstream's verl config (GPU, vLLM + hermes tools)

Run it with the stack's python (``.venv``); the agent runs elsewhere. AutoGen cannot install beside
agl-stream's pins, so the runner processes start with the frameworks side venv's python
(``make frameworks-venv``; ``--runner-python`` or ``AGL_RUNNER_PYTHON`` to use another) and the agent
is named as ``"<calc_agent.py>:calc_agent"``: this process never imports AutoGen, and the runners
import ``calc_agent.py`` (and its ``eval_utils``) from this folder, wherever the script is run from.

``smollm2`` and ``tiny`` train with ``agl.RL`` on the embedded CPU engine (configured below like the
other CPU examples: GRPO groups of 4, a time budget, temperature 0.7); any other ``--model`` is a
Hugging Face id or path given to upstream's verl config through ``agl.VERL``. Before and after
training the test problems (``data/test.jsonl``) are answered ``--eval-samples`` times each; accuracy
is the share answered exactly right (the reward is 1 for the exact result, else 0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

import agl_stream as agl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
#: the agent, for the runners to import in the side venv (a file path works from any directory)
AGENT = f"{HERE / 'calc_agent.py'}:calc_agent"
FRAMEWORKS_PYTHON = ROOT / ".agl" / "frameworks-venv" / "bin" / "python"
CPU_MODELS = ("smollm2", "tiny")


def verl_default_config() -> Dict[str, Any]:
    """Upstream's verl configuration (GPU): what ``agl.VERL`` maps onto the RL trainer."""
    config = {
        "algorithm": {
            "adv_estimator": "grpo",
            "use_kl_in_reward": False,
        },
        "data": {
            "train_batch_size": 32,
            "max_prompt_length": 4096,
            "max_response_length": 2048,
        },
        "actor_rollout_ref": {
            "rollout": {
                "tensor_model_parallel_size": 1,
                "n": 4,
                "log_prob_micro_batch_size_per_gpu": 4,
                "multi_turn": {"format": "hermes"},
                "name": "vllm",
                "gpu_memory_utilization": 0.6,
                "engine_kwargs": {
                    "vllm": {
                        "enable_auto_tool_choice": True,
                        "tool_call_parser": "hermes",
                    }
                },
            },
            "actor": {
                "ppo_mini_batch_size": 32,
                "ppo_micro_batch_size_per_gpu": 4,
                "optim": {"lr": 1e-6},
                "use_kl_loss": False,
                "kl_loss_coef": 0.0,
                "entropy_coeff": 0,
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.3,
                "fsdp_config": {
                    "param_offload": True,
                    "optimizer_offload": True,
                },
            },
            "ref": {
                "log_prob_micro_batch_size_per_gpu": 8,
                "fsdp_config": {"param_offload": True},
            },
            "model": {
                "path": "Qwen/Qwen2.5-1.5B-Instruct",
                "use_remove_padding": True,
                "enable_gradient_checkpointing": True,
            },
        },
        "trainer": {
            "n_gpus_per_node": 1,
            "val_before_train": True,
            "critic_warmup": 0,
            "logger": ["console", "wandb"],
            "project_name": "AgentLightning",
            "experiment_name": "calc_x",
            "nnodes": 1,
            "save_freq": 64,
            "test_freq": 32,
            "total_epochs": 2,
        },
    }
    return config


def cpu_config(model: str, steps: int, train_seconds: float, temperature: float, seed: int) -> Dict[str, Any]:
    """agl-stream's RL config for the embedded CPU engine (added: upstream's config needs a GPU).

    GRPO groups of 4 answers, 2 groups per learner step, weights published after every step; the
    time budget bounds the training loop on a slow machine. ``max_tokens`` reaches the agent's model
    client: a tool call or a short answer fits, rambling is cut."""
    config: Dict[str, Any] = {
        "run_id": "calc_x",
        "model": model,
        "sampling_parameters": {"temperature": temperature, "max_tokens": 96},
        "scheduler": {"mode": "train", "group_size": 4, "epochs": 1, "shuffle": True, "seed": seed,
                      "max_in_flight": 16},
        "batcher": {"group_size": 4, "batch_groups": 2, "group_timeout_s": 300, "min_group_size": 2,
                    "max_staleness": 2},
        "algorithm": {"estimator": "grpo", "loss_agg_mode": "token-mean", "tis_cap": 2.0, "kl_coef": 0.0, "seed": seed,
                      "max_prompt_length": 1024},  # fmt: skip
        "optim": {"lr": 2e-5, "max_grad_norm": 1.0},
        "engine": {"kind": "embedded", "max_batch_rows": 16},
        "publish_every": 1,
        "checkpoint_every": 0,
        "max_steps": steps,
        "max_train_seconds": train_seconds,
        "idle_timeout_s": 60,
    }
    if model == "tiny":  # a random model earns nothing: keep its all-zero groups so the smoke run takes its steps
        config["batcher"]["drop_zero_variance"] = False
    return config


def load_jsonl(path: str) -> List[Dict[str, Any]]:
    """The problems of a JSON-lines file (upstream reads parquet with ``datasets``)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def tool_use(settings: agl.Settings) -> Dict[str, float]:
    """Per evaluation (before/after): the share of rollouts in which the model called the calculator.

    With ``reflect_on_tool_use`` AutoGen makes a second LLM call only after a tool call, so a
    validation rollout with two LLM-call spans is one where the model used the tool."""
    from agl_stream_processors.clickhouse import connect

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        _, rows = ch.query_rows(
            "SELECT JSONExtractString(r.Metadata, 'eval') AS label, avg(ifNull(c.calls, 0) >= 2) "
            "FROM (SELECT RolloutId, any(Metadata) AS Metadata FROM rollouts FINAL WHERE Mode = 'val' "
            "GROUP BY RolloutId) AS r "
            "LEFT JOIN (SELECT RolloutId, count() AS calls FROM spans FINAL WHERE SpanName = 'openai.chat.completion' "
            "GROUP BY RolloutId) AS c ON r.RolloutId = c.RolloutId GROUP BY label"
        )  # fmt: skip
    finally:
        ch.close()
    return {str(label): float(share) for label, share in rows}


def train(
    *,
    train_file: str,
    val_file: str,
    model: str,
    ci: bool,
    ci_fast: bool,
    n_runners: int,
    runner_concurrency: int,
    runner_python: Path,
    steps: int,
    train_seconds: float,
    temperature: float,
    eval_samples: int,
    val_limit: Optional[int],
    seed: int,
    data_dir: Path,
) -> Dict[str, Any]:
    """Load the problems, build the algorithm (``agl.RL`` on the CPU, upstream's ``agl.VERL`` otherwise) and fit."""
    train_dataset = load_jsonl(train_file)
    val_dataset = load_jsonl(val_file)[:val_limit]
    print("First 5 rows of train dataset:")
    print(train_dataset[:5])
    print("First 5 rows of val dataset:")
    print(val_dataset[:5])
    print(f"{len(train_dataset)} training problems, {len(val_dataset)} validation problems")

    if model in CPU_MODELS:
        import torch

        torch.manual_seed(seed)
        config = cpu_config(model, steps, train_seconds, temperature, seed)
        algorithm: agl.Algorithm = agl.RL(config, output_dir=data_dir / "run", eval_samples=eval_samples)
    else:
        config = verl_default_config()
        config["actor_rollout_ref"]["model"]["path"] = model
        if ci or ci_fast:  # upstream's CI toggles: a short run under a fresh experiment name
            experiment_name = f"calc_x_{datetime.now().strftime('%Y%m%d%H%M%S')}_{uuid.uuid4().hex[:8]}"
            project_name = "AgentLightningCI"
            github_output = os.getenv("GITHUB_OUTPUT")
            if github_output:
                with open(github_output, "a") as f:
                    f.write(f"project_name={project_name}\nrun_name={experiment_name}\n")
            print(f"PROJECT_NAME={project_name}\nEXPERIMENT_NAME={experiment_name}")
            config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] = 0.6 if ci_fast else 0.8
            config["trainer"].update(total_epochs=1, total_training_steps=1 if ci_fast else 20,
                                     test_freq=1 if ci_fast else 20, experiment_name=experiment_name,
                                     project_name=project_name)  # fmt: skip
            config["trainer"].pop("save_freq", None)
        algorithm = agl.VERL(config, output_dir=data_dir / "run", eval_samples=eval_samples)

    settings = agl.Settings.from_env(data_dir=data_dir, kafka_session_timeout_ms=6000)
    trainer = agl.Trainer(algorithm=algorithm, n_runners=n_runners, runner_concurrency=runner_concurrency,
                          settings=settings, runner_python=runner_python)  # fmt: skip
    report = trainer.fit(AGENT, train_dataset, val_dataset=val_dataset)
    report["tool_use"] = tool_use(settings)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the Calc-X agent (AutoGen + MCP calculator) with agl-stream.")
    add = parser.add_argument
    add("--train-file", type=str, default=str(HERE / "data" / "train.jsonl"), help="training problems (JSON lines)")
    add("--val-file", type=str, default=str(HERE / "data" / "test.jsonl"), help="held-out problems (JSON lines)")
    add("--model", type=str, default="smollm2",
        help="smollm2 or tiny (CPU, agl.RL), or a Hugging Face id or path (upstream's verl config)")
    add("--steps", type=int, default=8, help="learner steps (CPU models; 2 groups of 4 rollouts each)")
    add("--train-seconds", type=float, default=360, help="time budget for the training loop (CPU models)")
    add("--temperature", type=float, default=0.7, help="sampling temperature, training and evaluation (CPU models)")
    add("--val", type=int, default=32, help="held-out problems to evaluate (the test split has 64)")
    add("--eval-samples", type=int, default=1, help="answers per held-out problem")
    add("--seed", type=int, default=0)
    add("--ci", action="store_true", help="upstream's minimal CI-style run (verl config only)")
    add("--ci-fast", action="store_true", help="limit the CI run to a single step (implies --ci)")
    add("--n-runners", type=int, default=None, help="runner processes (default: 1 on the CPU, 10 otherwise)")
    add("--runner-concurrency", type=int, default=None,
        help="rollouts at once per runner process (default: 16 on the CPU, 1 otherwise)")
    add("--runner-python", type=Path, default=Path(os.environ.get("AGL_RUNNER_PYTHON", FRAMEWORKS_PYTHON)),
        help="python of the runner processes, with AutoGen installed (default: the frameworks side venv)")
    add("--data-dir", type=Path, default=ROOT / ".agl" / "calc_x",
        help="the run's broker, ClickHouse and logs (emptied first)")
    add("--debug", action="store_true", help="enable debug logging")
    args = parser.parse_args()

    if not args.runner_python.exists():
        parser.error(f"{args.runner_python} does not exist: run `make frameworks-venv` or pass --runner-python")
    cpu = args.model in CPU_MODELS
    agl.setup_logging("DEBUG" if args.debug else "INFO")
    shutil.rmtree(args.data_dir, ignore_errors=True)  # a fresh run: its own ClickHouse tables and logs
    started = time.monotonic()
    report = train(
        train_file=args.train_file,
        val_file=args.val_file,
        model=args.model,
        ci=args.ci or args.ci_fast,
        ci_fast=args.ci_fast,
        n_runners=args.n_runners or (1 if cpu else 10),
        runner_concurrency=args.runner_concurrency or (16 if cpu else 1),
        runner_python=args.runner_python,
        steps=args.steps,
        train_seconds=args.train_seconds,
        temperature=args.temperature,
        eval_samples=args.eval_samples,
        val_limit=args.val,
        seed=args.seed,
        data_dir=args.data_dir,
    )
    elapsed = time.monotonic() - started

    before, after, tools = report.get("val_before", {}), report.get("val_after", {}), report.get("tool_use", {})
    print(f"\ncalc_x, {args.model}: {report['steps']} learner steps (stopped: {report.get('stop_reason')}), "
          f"{elapsed / 60:.1f} min; held-out problems: {len(before.get('rewards', []))} x {args.eval_samples} "
          "answers")
    print(f"  accuracy (exact match): {before.get('accuracy', 0):.3f} -> {after.get('accuracy', 0):.3f}")
    print(f"  called the calculator: {tools.get('before', 0):.3f} -> {tools.get('after', 0):.3f}")
    if "validation" in report:
        val = report["validation"]
        print(f"  accuracy gain {val['mean_diff']:+.3f}, 95% CI [{val['ci_low']:+.3f}, {val['ci_high']:+.3f}], "
              f"sign test p={val['sign_test_p']:.2g}")  # fmt: skip
    print(f"  report: {report.get('run_dir')}/report.json")


if __name__ == "__main__":
    main()
