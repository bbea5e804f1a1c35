"""Train the SQL agent with RL: Agent Lightning's ``train_sql_agent.py`` for Spider, ported to agl-stream.

    python train_sql_agent.py tiny    # CPU smoke run: agl-stream's random tiny model, one step
    python train_sql_agent.py fast    # upstream's CI configuration (Qwen2.5-Coder-0.5B)
    python train_sql_agent.py qwen    # Qwen2.5-Coder-1.5B-Instruct
    python train_sql_agent.py llama   # Llama-3.2-1B-Instruct (needs HF_TOKEN)

``agl.VERL`` reads the verl config below: the keys that apply are mapped onto agl-stream's RL trainer
(GRPO group size from ``rollout.n``, learning rate, clip ratios, lengths, steps...); a key it cannot
honour is an error naming it. Without a GPU the policy is served by the embedded CPU engine instead
of vLLM. Data: ``data/*.jsonl`` (a small company database; upstream reads Spider's parquet files).
"""

from __future__ import annotations

import argparse
import os
from copy import deepcopy
from datetime import datetime
from typing import Any, Dict, Optional

import pandas as pd
from sql_agent import LitSQLAgent

import agl_stream as agl

RL_TRAINING_CONFIG: Dict[str, Any] = {
    "algorithm": {
        "adv_estimator": "grpo",
        "use_kl_in_reward": False,
    },
    "data": {
        "train_files": "data/train_spider.jsonl",
        "val_files": "data/test_dev_500.jsonl",
        "train_batch_size": 32,
        "max_prompt_length": 4096,
        "max_response_length": 2048,
        "truncation": "error",
    },
    "actor_rollout_ref": {
        "rollout": {
            "tensor_model_parallel_size": 1,
            "n": 4,
            "log_prob_micro_batch_size_per_gpu": 4,
            "multi_turn": {"format": "hermes"},
            "name": "vllm",
            "gpu_memory_utilization": 0.8,
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
            "path": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
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
        "experiment_name": "spider",
        "nnodes": 1,
        "test_freq": 32,
        "total_epochs": 2,
    },
}


def config_train_fast() -> Dict[str, Any]:
    """A short run for CI."""
    timestamp = datetime.now().strftime("%Y%m%d%H%M%S")
    experiment_name = f"spider_{timestamp}"
    project_name = "AgentLightningCI"
    github_output = os.getenv("GITHUB_OUTPUT")
    if github_output:
        with open(github_output, "a") as f:
            f.write(f"project_name={project_name}\n")
            f.write(f"run_name={experiment_name}\n")
    print(f"PROJECT_NAME={project_name}")
    print(f"EXPERIMENT_NAME={experiment_name}")

    config = deepcopy(RL_TRAINING_CONFIG)
    config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] = 0.6
    config["actor_rollout_ref"]["model"]["path"] = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    config["data"]["val_files"] = "data/test_dev.jsonl"
    config["trainer"]["total_epochs"] = 1
    config["trainer"]["total_training_steps"] = 1
    config["trainer"]["experiment_name"] = experiment_name
    config["trainer"]["project_name"] = project_name
    config["trainer"]["test_freq"] = 1
    return config


def config_train_tiny() -> Dict[str, Any]:
    """agl-stream addition: one learner step on the CPU with the random tiny model (what make test runs)."""
    config = config_train_fast()
    config["actor_rollout_ref"]["model"]["path"] = "tiny"
    config["actor_rollout_ref"]["rollout"]["n"] = 2
    config["data"]["train_batch_size"] = 2
    config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 2
    config["data"]["max_prompt_length"] = 1024
    config["data"]["max_response_length"] = 16
    config["data"]["train_files"] = "data/train_tiny.jsonl"
    config["data"]["val_files"] = "data/test_tiny.jsonl"
    config["trainer"]["experiment_name"] = "spider_tiny"
    config["trainer"]["logger"] = ["console"]
    return config


def config_train_qwen() -> Dict[str, Any]:
    return deepcopy(RL_TRAINING_CONFIG)


def config_train_llama() -> Dict[str, Any]:
    """Llama-3.2-1B-Instruct; needs HF_TOKEN."""
    config = deepcopy(RL_TRAINING_CONFIG)
    config["actor_rollout_ref"]["rollout"]["multi_turn"]["format"] = "llama3_json"
    config["actor_rollout_ref"]["model"]["path"] = "meta-llama/Llama-3.2-1B-Instruct"
    return config


def train(config: Dict[str, Any], active_agent: Optional[str]) -> None:
    agent = LitSQLAgent()
    algorithm = agl.VERL(config)
    trainer = agl.Trainer(n_runners=10, algorithm=algorithm, adapter={"agent_match": active_agent})
    print("Adapter agent match acknowledged:", trainer.adapter.agent_match)  # type: ignore

    train_data = pd.read_json(config["data"]["train_files"], lines=True).to_dict(orient="records")  # type: ignore
    val_data = pd.read_json(config["data"]["val_files"], lines=True).to_dict(orient="records")  # type: ignore
    trainer.fit(agent, train_dataset=train_data, val_dataset=val_data)  # type: ignore


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the SQL agent with agl-stream's RL trainer")
    parser.add_argument("config", choices=["tiny", "fast", "qwen", "llama"], help="training configuration")
    parser.add_argument("--active-agent", type=str, help="train only the LLM calls of agents matching this regex")
    args = parser.parse_args()

    config = {"tiny": config_train_tiny, "fast": config_train_fast, "qwen": config_train_qwen,
              "llama": config_train_llama}[args.config]()  # fmt: skip
    print(f"Starting training with '{args.config}' configuration...")
    print(f"Active agent: {args.active_agent}")
    train(config, args.active_agent)


if __name__ == "__main__":
    main()
