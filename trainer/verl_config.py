"""Upstream's ``agl.VERL(config)``: read a verl ``main_ppo`` config dict into this trainer's RL config.

Every leaf key of the dict falls in one of these groups (see :data:`MAPPED` and the sets below):

* **mapped**: the value sets the matching :class:`TrainerConfig` field (``actor_rollout_ref.rollout.n``
  -> the GRPO group size, ``actor_rollout_ref.actor.optim.lr`` -> ``optim.lr``, ...);
* **fixed here**: accepted only with the value agl-stream implements (``algorithm.use_kl_in_reward:
  false``, ``trainer.nnodes: 1``...); another value is refused;
* **not read by upstream either**: verl dataset options Agent Lightning ignores because data comes
  from ``Trainer.fit`` (``data.train_files``, ``data.truncation``...);
* **worker sizing**: micro-batch sizes and FSDP offload of verl's Ray/FSDP workers; the learner here
  sizes micro batches by tokens (``backend.micro_batch_tokens``), so they have no effect;
* **not honoured, warned**: ``trainer.test_freq`` (validation runs before and after training only);

and anything else is refused: :class:`VerlConfigError` names every such key, so a config never
silently means something else here.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional

from agl_stream_trainer.algorithms.aggregation import DEFAULT_AGGREGATION

logger = logging.getLogger(__name__)


class VerlConfigError(ValueError):
    """Keys of a verl config that this backend cannot honour."""


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


#: verl's filter_groups metrics that mean "the trajectory's reward" (the batcher compares final rewards)
_FILTER_METRICS = {"acc": "acc", "score": "score", "seq_reward": "seq_reward", "seq_final_reward": "seq_final_reward"}
_ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "reinforce_plus_plus": "reinforce_plus_plus", "drgrpo": "drgrpo"}
_AGGREGATION_LEVELS = {"transition": "transition", "trajectory": "trajectory"}
#: v1.0's policy_loss.loss_mode: ``vanilla`` keeps loss_agg_mode, ``per_rollout_mean`` weighs rollouts the same
_LOSS_MODES = {"vanilla": None, "per_rollout_mean": "rollout-mean-token-mean"}

#: verl key -> (TrainerConfig path, converter)
MAPPED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "algorithm.adv_estimator": ("algorithm.estimator", lambda v: _ESTIMATORS[v]),
    "algorithm.gamma": ("algorithm.gamma", float),
    # DAPO's dynamic sampling (verl's filter_groups, off unless enabled, as in verl): all-equal groups are left out
    "algorithm.filter_groups.enable": ("batcher.drop_zero_variance", bool),
    "algorithm.filter_groups.metric": ("filter_metric", lambda v: _FILTER_METRICS[v]),
    "algorithm.filter_groups.max_num_gen_batches": ("max_num_gen_batches", int),
    "data.max_prompt_length": ("algorithm.max_prompt_length", int),
    "data.max_response_length": ("algorithm.max_response_length", int),
    "data.train_batch_size": ("batcher.batch_groups", int),
    "actor_rollout_ref.rollout.n": ("group_size", int),
    "actor_rollout_ref.rollout.temperature": ("sampling_parameters.temperature", float),
    "actor_rollout_ref.rollout.top_p": ("sampling_parameters.top_p", float),
    "actor_rollout_ref.rollout.name": ("engine.kind", str),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": ("vllm_arg:--tensor-parallel-size", int),
    "actor_rollout_ref.rollout.gpu_memory_utilization": ("vllm_arg:--gpu-memory-utilization", float),
    "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice": ("vllm_flag:--enable-auto-tool-choice", bool),
    "actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser": ("vllm_arg:--tool-call-parser", str),
    "actor_rollout_ref.actor.ppo_mini_batch_size": ("mini_batch_size", int),
    "actor_rollout_ref.actor.ppo_epochs": ("algorithm.ppo_epochs", int),
    "actor_rollout_ref.actor.optim.lr": ("optim.lr", float),
    "actor_rollout_ref.actor.optim.weight_decay": ("optim.weight_decay", float),
    "actor_rollout_ref.actor.optim.lr_warmup_steps": ("optim.warmup_steps", int),
    "actor_rollout_ref.actor.grad_clip": ("optim.max_grad_norm", float),
    "actor_rollout_ref.actor.use_kl_loss": ("use_kl_loss", bool),
    "actor_rollout_ref.actor.kl_loss_coef": ("kl_loss_coef", float),
    "actor_rollout_ref.actor.kl_loss_type": ("algorithm.kl_type", str),
    "actor_rollout_ref.actor.entropy_coeff": ("algorithm.entropy_coeff", float),
    "actor_rollout_ref.actor.clip_ratio_low": ("algorithm.clip_ratio_low", float),
    "actor_rollout_ref.actor.clip_ratio_high": ("algorithm.clip_ratio_high", float),
    "actor_rollout_ref.actor.clip_ratio_c": ("algorithm.clip_ratio_c", float),
    "actor_rollout_ref.actor.loss_agg_mode": ("algorithm.loss_agg_mode", str),
    # trajectory aggregation: 0.3.0's preview keys and v1.0's defaults (trainer/algorithms/aggregation.py)
    "agentlightning.trace_aggregator.level": ("algorithm.aggregation", lambda v: _AGGREGATION_LEVELS[v]),
    "agentlightning.trace_aggregator.trajectory_max_prompt_length": ("trajectory_max_prompt_length", int),
    "agentlightning.trace_aggregator.trajectory_max_response_length": ("trajectory_max_response_length", int),
    "actor_rollout_ref.actor.policy_loss.loss_mode": ("policy_loss_mode", lambda v: _LOSS_MODES[v]),
    "algorithm.enable_rollout_level_advantage": ("algorithm.rollout_advantage", bool),
    "actor_rollout_ref.model.path": ("model", str),
    "actor_rollout_ref.model.enable_gradient_checkpointing": ("backend.gradient_checkpointing", bool),
    "trainer.val_before_train": ("validate_before", bool),
    "trainer.logger": ("logger", list),
    "trainer.project_name": ("project_name", str),
    "trainer.experiment_name": ("run_id", str),
    "trainer.save_freq": ("checkpoint_every", int),
    "trainer.total_epochs": ("epochs", int),
    "trainer.total_training_steps": ("max_steps", int),
    "trainer.default_local_dir": ("checkpoint_dir", str),
}

#: accepted only with this value (what agl-stream does)
FIXED: dict[str, tuple[Any, str]] = {
    "algorithm.use_kl_in_reward": (False, "a KL penalty in the reward is not implemented; use use_kl_loss"),
    "algorithm.norm_adv_by_std_in_grpo": (True, "use adv_estimator: drgrpo for GRPO without std normalisation"),
    "trainer.nnodes": (1, "the learner is one process; scale rollouts with runners instead"),
    "trainer.n_gpus_per_node": (1, "the learner uses one device"),
    "trainer.critic_warmup": (0, "there is no critic (GRPO-family estimators only)"),
    "agentlightning.trace_aggregator.debug": (False, "prefix breaks are counted per step in training_steps and "
                                              "listed by the saved query prefix_breaks; no mismatch files are written"),
}

#: verl dataset options that Agent Lightning's VERL does not read either (tasks come from Trainer.fit)
NOT_READ_UPSTREAM = {"data.train_files", "data.val_files", "data.truncation", "data.filter_overlong_prompts",
                     "data.val_batch_size", "actor_rollout_ref.rollout.multi_turn.format",
                     "agentlightning.trace_aggregator.mismatch_log_dir"}  # fmt: skip (read by upstream only with debug)

#: sizing of verl's FSDP / Ray workers; no effect on the learner here
WORKER_SIZING_SUFFIXES = ("micro_batch_size_per_gpu", "micro_batch_size", "param_offload", "optimizer_offload",
                          "use_remove_padding", "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "free_cache_engine",
                          "enforce_eager", "max_num_batched_tokens", "max_model_len")  # fmt: skip

#: keys accepted with a warning that this backend does not do what they ask
WARNED = {"trainer.test_freq": "validation runs before (val_before_train) and after training, not every test_freq steps"}


def _set(target: dict[str, Any], path: str, value: Any) -> None:
    node = target
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def map_verl_config(config: Mapping[str, Any], *, gpu: Optional[bool] = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(trainer_config_dict, rl_options)`` for a verl config; raises :class:`VerlConfigError` naming
    every key that cannot be honoured. ``gpu`` (default: detected) decides what ``rollout.name: vllm``
    means: the vLLM engine on a GPU, the embedded CPU engine otherwise (logged)."""
    flat = _flatten(config)
    refused: list[str] = []
    values: dict[str, Any] = {}
    for key, value in flat.items():
        if key in MAPPED:
            path, convert = MAPPED[key]
            try:
                values[path] = convert(value)
            except (KeyError, TypeError, ValueError):
                refused.append(f"{key}={value!r} (not supported here)")
        elif key in FIXED:
            expected, why = FIXED[key]
            if value != expected:
                refused.append(f"{key}={value!r} ({why})")
        elif key in NOT_READ_UPSTREAM:
            logger.debug("verl key %s is not read (Agent Lightning's VERL does not read it either)", key)
        elif key.rsplit(".", 1)[-1].endswith(WORKER_SIZING_SUFFIXES):
            logger.debug("verl key %s sizes verl's FSDP/Ray workers; no effect here", key)
        elif key in WARNED:
            logger.warning("verl key %s=%r is not honoured: %s", key, value, WARNED[key])
        else:
            refused.append(key)
    if refused:
        raise VerlConfigError("this verl config has keys agl-stream cannot honour: " + "; ".join(sorted(refused)) +
                              ". See trainer/verl_config.py for the keys that map onto the RL trainer.")  # fmt: skip
    return _build(values, gpu)


def _build(values: dict[str, Any], gpu: Optional[bool]) -> tuple[dict[str, Any], dict[str, Any]]:
    trainer: dict[str, Any] = {}
    options: dict[str, Any] = {}
    vllm_args: list[str] = []
    for path, value in values.items():
        if path.startswith("vllm_arg:"):
            vllm_args += [path.split(":", 1)[1], str(value)]
        elif path.startswith("vllm_flag:"):
            if value:
                vllm_args.append(path.split(":", 1)[1])
        elif path in ("validate_before", "project_name", "logger"):
            options[path] = value
        elif path not in ("group_size", "mini_batch_size", "use_kl_loss", "kl_loss_coef", "epochs", "engine.kind",
                          "filter_metric", "max_num_gen_batches", "trajectory_max_prompt_length",
                          "trajectory_max_response_length", "policy_loss_mode"):  # fmt: skip
            _set(trainer, path, value)
    # upstream's trajectory rows use these limits instead, whether the level is given or ours by default (trajectory,
    # as v1.0's; 0.3.0's default was transition: a 0.3.0 config that wants one row per call says `level: transition`)
    if values.get("algorithm.aggregation", DEFAULT_AGGREGATION) == "trajectory":
        for key, path in (("trajectory_max_prompt_length", "algorithm.max_prompt_length"),
                          ("trajectory_max_response_length", "algorithm.max_response_length")):  # fmt: skip
            if values.get(key) is not None:
                _set(trainer, path, values[key])
    if values.get("policy_loss_mode"):
        _set(trainer, "algorithm.loss_agg_mode", values["policy_loss_mode"])
    # verl trains every group unless filter_groups.enable: a ported config keeps that meaning
    _set(trainer, "batcher.drop_zero_variance", values.get("batcher.drop_zero_variance", False))
    max_response = values.get("algorithm.max_response_length")
    if max_response is not None:  # verl generates at most this many tokens per turn: agents get it as max_tokens
        _set(trainer, "sampling_parameters.max_tokens", max_response)
    if "sampling_parameters" in trainer:
        trainer["sampling_parameters"].setdefault("temperature", 1.0)  # verl's rollout default
    group = values.get("group_size")
    if group is not None:
        _set(trainer, "batcher.group_size", group)
        _set(trainer, "batcher.min_group_size", min(2, group))
        _set(trainer, "scheduler.group_size", group)
    if values.get("epochs") is not None:
        _set(trainer, "scheduler.epochs", values["epochs"])
    batch = values.get("batcher.batch_groups")
    gen_batches = values.get("max_num_gen_batches")
    if gen_batches:  # verl gives up after this many generation batches of train_batch_size groups (0: never)
        _set(trainer, "batcher.max_zero_variance_groups", gen_batches * (batch or 1))
    elif gen_batches == 0:
        _set(trainer, "batcher.max_zero_variance_groups", 10**9)
    mini = values.get("mini_batch_size")
    if batch and mini:
        if batch % mini:
            raise VerlConfigError(f"data.train_batch_size ({batch}) must be a multiple of actor.ppo_mini_batch_size ({mini})")
        _set(trainer, "algorithm.mini_batches", batch // mini)
    if values.get("use_kl_loss"):
        _set(trainer, "algorithm.kl_coef", values.get("kl_loss_coef", 0.001))
    if "wandb" in (options.get("logger") or []):
        _set(trainer, "metrics.wandb_project", options.get("project_name") or "agl-stream")
    kind = values.get("engine.kind", "vllm")
    if kind not in ("vllm", "hf"):
        raise VerlConfigError(f"actor_rollout_ref.rollout.name={kind!r}: use vllm (GPU) or hf (CPU)")
    if gpu is None:
        gpu = _has_gpu()
    if kind == "vllm" and gpu:
        _set(trainer, "engine.kind", "vllm")
        _set(trainer, "engine.vllm_args", vllm_args)
    else:
        if kind == "vllm":
            logger.warning("rollout.name=vllm without a GPU (or vLLM): serving the policy with the embedded CPU engine")
        _set(trainer, "engine.kind", "embedded")
    return trainer, {"validate_before": options.get("validate_before", True)}


def _has_gpu() -> bool:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())
