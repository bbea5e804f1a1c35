"""Train the RAG agent: Agent Lightning's ``examples/rag/train_rag.py``, ported to agl-stream.

    python examples/ported/rag/train_rag.py               # SmolLM2-135M on the CPU: GRPO, 6 min budget, eval before/after
    python examples/ported/rag/train_rag.py tiny --steps 1 --val 4   # smoke run: agl-stream's random tiny model
    python examples/ported/rag/train_rag.py single_gpu    # upstream's configuration (GPU, vLLM + hermes tools)
    python examples/ported/rag/train_rag.py fast          # upstream's CI configuration

Upstream's configurations (``fast``, ``single_gpu``) are its verl config dict, given to ``agl.VERL``; the
added ``smollm2`` (the default: this port runs where there is no GPU) and ``tiny`` train with ``agl.RL``
on the embedded CPU engine, which serves OpenAI tool calls in the hermes format. Upstream starts the
retriever by hand in another terminal; here the script starts ``wiki_retriever_mcp.py`` itself (a
child process serving SSE on ``--mcp-port``, upstream's 8099 by default) and stops it at the end, so
one command trains. Before and after training the held-out questions are answered; the script prints
exact match and F1 (the reward) before -> after, and how often the agent called ``retrieve``, read
from the run's ClickHouse tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from copy import deepcopy
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pandas as pd
from rag_agent import RAGAgent
from utils import exact_match_score, extract_answer

import agl_stream as agl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DATA = ROOT / "examples" / "rag" / "data"  # examples/rag's questions and corpus, shared with this port
RETRIEVER = HERE / "wiki_retriever_mcp" / "wiki_retriever_mcp.py"
CPU_CONFIGS = ("smollm2", "tiny")

# Upstream's base configuration (verl's names), with this repository's data files.
RL_TRAINING_CONFIG: Dict[str, Any] = {
    "algorithm": {
        "adv_estimator": "grpo",
        "use_kl_in_reward": False,
    },
    "data": {
        "train_files": str(DATA / "train.jsonl"),
        "val_files": str(DATA / "val.jsonl"),
        "train_batch_size": 16,
        "max_prompt_length": 4096,
        "max_response_length": 1024,
        "truncation": "error",
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
            "ppo_mini_batch_size": 16,
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
        "logger": ["console"],
        "project_name": "AgentLightning",
        "experiment_name": "rag_agent",
        "nnodes": 1,
        "test_freq": 10,
        "total_epochs": 200,
    },
}


def config_train_fast() -> Dict[str, Any]:
    """Upstream's CI configuration: tiny batches, one epoch, a fresh experiment name."""
    config = deepcopy(RL_TRAINING_CONFIG)
    config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] = 0.4
    config["data"]["train_batch_size"] = 2
    config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 2
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] = 1
    config["trainer"]["total_epochs"] = 1
    config["trainer"]["experiment_name"] = f"rag_fast_{datetime.now().strftime('%Y%m%d%H%M%S')}"
    config["trainer"]["test_freq"] = 1
    return config


def config_train_single_gpu() -> Dict[str, Any]:
    """Upstream's one-GPU configuration (24 GB): less vLLM memory, small batches, offloading on."""
    config = deepcopy(RL_TRAINING_CONFIG)
    config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] = 0.4
    config["data"]["train_batch_size"] = 4
    config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 4
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] = 1
    config["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] = 2
    config["actor_rollout_ref"]["actor"]["fsdp_config"]["param_offload"] = True
    config["actor_rollout_ref"]["actor"]["fsdp_config"]["optimizer_offload"] = True
    return config


def config_train_cpu(model: str, steps: int, train_seconds: float, seed: int, max_tokens: int) -> Dict[str, Any]:
    """agl-stream's RL config for the embedded CPU engine (added: upstream's needs a GPU).

    GRPO groups of 4 answers, 2 groups per learner step, weights published after every step, a time
    budget for the training loop; ``max_tokens`` reaches the agent's model settings (upstream: 4096),
    so a rambling answer on the CPU is cut."""
    config: Dict[str, Any] = {
        "run_id": "rag_agent",
        "model": model,
        "sampling_parameters": {"temperature": 0.7, "max_tokens": max_tokens},
        "scheduler": {"mode": "train", "group_size": 4, "epochs": 1, "shuffle": True, "seed": seed,
                      "max_in_flight": 16},
        "batcher": {"group_size": 4, "batch_groups": 2, "group_timeout_s": 300, "min_group_size": 2,
                    "max_staleness": 2},
        "algorithm": {"estimator": "grpo", "loss_agg_mode": "token-mean", "tis_cap": 2.0, "kl_coef": 0.0, "seed": seed,
                      "max_prompt_length": 2048},  # fmt: skip
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


@contextlib.contextmanager
def retriever_server(port: int, log_path: Path, timeout: float = 60.0) -> Iterator[str]:
    """Run ``wiki_retriever_mcp.py`` as a child process serving SSE on ``port``; yields its URL.

    Upstream runs the server by hand beside training; a child keeps it to the training's lifetime.
    Raises with the server's log when it exits or does not accept connections within ``timeout``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, str(RETRIEVER), "--port", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the retriever exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the retriever did not listen on port {port} in {timeout:.0f} s:\n"
                                   f"{log_path.read_text()[-3000:]}")  # fmt: skip
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/sse"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def evaluation_details(settings: agl.Settings) -> Dict[str, Dict[str, float]]:
    """Per evaluation (``before`` / ``after``), from ClickHouse: exact match of the tagged answer, the share
    of answers inside ``<answer>`` tags, and the share of rollouts that called ``retrieve`` (and calls each).

    The agent returns F1 only (upstream's reward); its final output is the last LLM call's text, which the
    runner recorded, so exact match is computed here from that text and the question's ground truth.
    A failed rollout counts as wrong, as in the trainer's own evaluation."""
    from agl_stream_processors.clickhouse import connect

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        _, rows = ch.query_rows(
            "SELECT JSONExtractString(r.Metadata, 'eval'), r.Status, r.Input, "
            "argMaxIf(s.SpanAttributes['gen_ai.completion.0.content'], s.Timestamp, s.SpanName = 'openai.chat.completion'), "
            "countIf(s.SpanName = 'retrieve.tool') "
            "FROM (SELECT RolloutId, argMax(Metadata, UpdatedAt) AS Metadata, argMax(Status, UpdatedAt) AS Status, "
            "      argMax(Input, UpdatedAt) AS Input, argMax(AttemptId, UpdatedAt) AS AttemptId "
            "      FROM rollouts FINAL WHERE Mode = 'val' GROUP BY RolloutId) AS r "
            "LEFT JOIN (SELECT RolloutId, AttemptId, SpanName, SpanAttributes, Timestamp FROM spans FINAL) AS s "
            "ON s.RolloutId = r.RolloutId AND s.AttemptId = r.AttemptId "
            "GROUP BY r.RolloutId, r.Metadata, r.Status, r.Input"
        )  # fmt: skip
    finally:
        ch.close()
    per_label: Dict[str, List[tuple[float, float, float, int]]] = {}
    for label, status, task_json, final_output, tool_calls in rows:
        task = json.loads(task_json)
        ok = status == "succeeded"
        answer = extract_answer(final_output) if ok else ""
        per_label.setdefault(str(label), []).append((
            float(ok and exact_match_score(answer, str(task["answer"]))),
            float(ok and "<answer>" in (final_output or "") and "</answer>" in (final_output or "")),
            float(tool_calls > 0), int(tool_calls)))  # fmt: skip
    return {
        label: {"exact_match": sum(r[0] for r in rs) / len(rs), "tagged_answer": sum(r[1] for r in rs) / len(rs),
                "called_retrieve": sum(r[2] for r in rs) / len(rs), "retrieve_calls": sum(r[3] for r in rs) / len(rs),
                "rollouts": len(rs)}  # fmt: skip
        for label, rs in per_label.items()
    }


def train(
    config: Dict[str, Any],
    active_agent: Optional[str],
    *,
    algorithm: Optional[agl.Algorithm] = None,
    n_runners: int = 4,
    runner_concurrency: int = 1,
    val_limit: Optional[int] = None,
    mcp_port: int = 8099,
    data_dir: Optional[Path] = None,
) -> Dict[str, Any]:
    """Train the RAG agent: upstream's steps (agent, algorithm, trainer, data, fit), with the retriever started here.

    ``config`` is upstream's verl dict (its data files are read in either case); ``algorithm`` replaces
    ``agl.VERL(config)`` (the CPU configurations pass ``agl.RL``)."""
    data_dir = data_dir or ROOT / ".agl" / "rag_agent"
    settings = agl.Settings.from_env(data_dir=data_dir, kafka_session_timeout_ms=6000)
    with retriever_server(mcp_port, data_dir / "retriever.log") as mcp_url:
        # 1. the agent, pointed at the retriever this script started
        agent = RAGAgent(mcp_server_url=mcp_url)

        # 2. the algorithm
        algorithm = algorithm or agl.VERL(config, output_dir=data_dir / "run")

        # 3. the trainer: runner processes, the agent's triplets selected by name when asked
        trainer = agl.Trainer(n_runners=n_runners, algorithm=algorithm, adapter={"agent_match": active_agent},
                              runner_concurrency=runner_concurrency, settings=settings)  # fmt: skip

        # 4. the data (JSON lines here; upstream reads parquet)
        train_data: List[Dict[str, Any]] = pd.read_json(config["data"]["train_files"], lines=True).to_dict(orient="records")
        val_data: List[Dict[str, Any]] = pd.read_json(config["data"]["val_files"], lines=True).to_dict(orient="records")

        # 5. training
        report = trainer.fit(agent, train_dataset=train_data, val_dataset=val_data[:val_limit])
    report["details"] = evaluation_details(settings)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="Train a RAG agent (OpenAI Agents SDK + MCP retriever) with agl-stream")
    parser.add_argument("config", choices=["smollm2", "tiny", "fast", "single_gpu"], default="smollm2", nargs="?",
                        help="smollm2 / tiny: CPU (agl.RL, added); fast / single_gpu: upstream's (agl.VERL, GPU)")
    parser.add_argument("--active-agent", type=str, help="train only the LLM calls of this agent (agent_match)")
    parser.add_argument("--steps", type=int, default=8, help="learner steps (CPU; 2 groups of 4 rollouts each)")
    parser.add_argument("--train-seconds", type=float, default=360, help="time budget for the training loop (CPU)")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per LLM reply (CPU; upstream: 4096)")
    parser.add_argument("--val", type=int, default=24, help="held-out questions to evaluate (the split has 24)")
    parser.add_argument("--eval-samples", type=int, default=1, help="answers per held-out question (CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mcp-port", type=int, default=8099, help="the retriever's port (upstream's 8099)")
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".agl" / "rag_agent",
                        help="the run's broker, ClickHouse and logs (emptied first)")
    args = parser.parse_args()

    cpu = args.config in CPU_CONFIGS
    config = config_train_single_gpu() if args.config in ("smollm2", "tiny", "single_gpu") else config_train_fast()
    algorithm: Optional[agl.Algorithm] = None
    if cpu:
        import torch

        torch.manual_seed(args.seed)
        cpu_config = config_train_cpu(args.config, args.steps, args.train_seconds, args.seed, args.max_tokens)
        algorithm = agl.RL(cpu_config, output_dir=args.data_dir / "run", eval_samples=args.eval_samples)
        print(f"Starting training with '{args.config}' on the CPU: {args.steps} steps at most, "
              f"{args.train_seconds:.0f} s budget, max_tokens {args.max_tokens}")  # fmt: skip
    else:
        print(f"Starting training with '{args.config}' configuration...")
        print(f"Model: {config['actor_rollout_ref']['model']['path']}")
        print(f"Batch Size: {config['data']['train_batch_size']}")
        print(f"GPU Mem Util: {config['actor_rollout_ref']['rollout']['gpu_memory_utilization']}")

    shutil.rmtree(args.data_dir, ignore_errors=True)  # a fresh run: its own ClickHouse tables and logs
    started = time.monotonic()
    report = train(config, args.active_agent, algorithm=algorithm, n_runners=1 if cpu else 4,
                   runner_concurrency=16 if cpu else 1, val_limit=args.val, mcp_port=args.mcp_port,
                   data_dir=args.data_dir)  # fmt: skip
    elapsed = time.monotonic() - started

    before, after = report.get("val_before", {}), report.get("val_after", {})
    details = report.get("details", {})
    d_before, d_after = details.get("before", {}), details.get("after", {})
    print(f"\nrag agent, {args.config}: {report['steps']} learner steps (stopped: {report.get('stop_reason')}), "
          f"{elapsed / 60:.1f} min; held-out questions: {len(before.get('rewards', []))} x {args.eval_samples}")
    print(f"  exact match: {d_before.get('exact_match', 0):.3f} -> {d_after.get('exact_match', 0):.3f}")
    print(f"  F1 (the reward): {before.get('mean_reward', 0):.3f} -> {after.get('mean_reward', 0):.3f}")
    for key, name in (("called_retrieve", "called retrieve"), ("retrieve_calls", "retrieve calls per rollout"),
                      ("tagged_answer", "answered in <answer> tags")):  # fmt: skip
        print(f"  {name}: {d_before.get(key, 0):.3f} -> {d_after.get(key, 0):.3f}")
    if "validation_reward" in report:
        val = report["validation_reward"]
        print(f"  F1 gain {val['mean_diff']:+.3f}, 95% CI [{val['ci_low']:+.3f}, {val['ci_high']:+.3f}], "
              f"sign test p={val['sign_test_p']:.2g}")  # fmt: skip
    print(f"  report: {report.get('run_dir')}/report.json")


if __name__ == "__main__":
    main()
