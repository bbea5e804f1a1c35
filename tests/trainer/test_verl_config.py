"""``agl.VERL(config)``: upstream's verl config dict mapped onto the RL trainer, the rest refused by name."""

from __future__ import annotations

import copy
import logging

import pytest

from agl_stream_trainer.verl_config import VerlConfigError, map_verl_config

# upstream's calc-x example configuration (examples/calc_x/train_calc_agent.py, Agent Lightning 0.3)
CALC_X = {
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "data": {"train_batch_size": 32, "max_prompt_length": 4096, "max_response_length": 2048},
    "actor_rollout_ref": {
        "rollout": {"tensor_model_parallel_size": 1, "n": 4, "log_prob_micro_batch_size_per_gpu": 4,
                    "multi_turn": {"format": "hermes"}, "name": "vllm", "gpu_memory_utilization": 0.6,
                    "engine_kwargs": {"vllm": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}}},
        "actor": {"ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": 4, "optim": {"lr": 1e-6},
                  "use_kl_loss": False, "kl_loss_coef": 0.0, "entropy_coeff": 0, "clip_ratio_low": 0.2,
                  "clip_ratio_high": 0.3, "fsdp_config": {"param_offload": True, "optimizer_offload": True}},
        "ref": {"log_prob_micro_batch_size_per_gpu": 8, "fsdp_config": {"param_offload": True}},
        "model": {"path": "Qwen/Qwen2.5-1.5B-Instruct", "use_remove_padding": True, "enable_gradient_checkpointing": True},
    },
    "trainer": {"n_gpus_per_node": 1, "val_before_train": True, "critic_warmup": 0, "logger": ["console", "wandb"],
                "project_name": "AgentLightning", "experiment_name": "calc_x", "nnodes": 1, "save_freq": 64,
                "test_freq": 32, "total_epochs": 2},
}  # fmt: skip


def test_calc_x_config_maps_onto_the_trainer_config(caplog: pytest.LogCaptureFixture) -> None:
    from agl_stream_trainer.config import TrainerConfig

    with caplog.at_level(logging.WARNING):
        trainer, options = map_verl_config(CALC_X, gpu=False)
    config = TrainerConfig.model_validate(trainer)  # valid as a whole
    assert config.model == "Qwen/Qwen2.5-1.5B-Instruct" and config.run_id == "calc_x"
    assert config.algorithm.estimator == "grpo" and config.algorithm.kl_coef == 0.0
    assert (config.algorithm.clip_ratio_low, config.algorithm.clip_ratio_high) == (0.2, 0.3)
    assert (config.algorithm.max_prompt_length, config.algorithm.max_response_length) == (4096, 2048)
    assert config.optim.lr == 1e-6 and config.backend.gradient_checkpointing is True
    assert config.batcher.group_size == 4 and config.scheduler and config.scheduler.group_size == 4
    assert config.batcher.batch_groups == 32 and config.algorithm.mini_batches == 1
    assert config.scheduler.epochs == 2 and config.checkpoint_every == 64
    assert config.sampling_parameters == {"max_tokens": 2048, "temperature": 1.0}
    assert config.metrics.wandb_project == "AgentLightning"
    assert config.engine.kind == "embedded"  # no GPU: the CPU engine stands in for vLLM
    assert config.batcher.drop_zero_variance is False  # verl trains every group unless filter_groups.enable
    assert options == {"validate_before": True}
    assert "test_freq" in caplog.text and "embedded CPU engine" in caplog.text


def test_vllm_keys_become_engine_arguments_on_a_gpu() -> None:
    trainer, _ = map_verl_config(CALC_X, gpu=True)
    assert trainer["engine"] == {"kind": "vllm", "vllm_args": [
        "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.6", "--enable-auto-tool-choice",
        "--tool-call-parser", "hermes"]}  # fmt: skip


def test_kl_loss_and_mini_batches() -> None:
    config = copy.deepcopy(CALC_X)
    config["actor_rollout_ref"]["actor"].update(use_kl_loss=True, kl_loss_coef=0.05, ppo_mini_batch_size=8)
    trainer, _ = map_verl_config(config, gpu=False)
    assert trainer["algorithm"]["kl_coef"] == 0.05 and trainer["algorithm"]["mini_batches"] == 4


def test_filter_groups_is_dynamic_sampling() -> None:
    from agl_stream_trainer.config import TrainerConfig

    config = copy.deepcopy(CALC_X)
    config["algorithm"]["filter_groups"] = {"enable": True, "metric": "acc", "max_num_gen_batches": 10}
    batcher = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).batcher
    assert batcher.drop_zero_variance is True and batcher.max_zero_variance_groups == 320  # 10 batches of 32 groups
    config["algorithm"]["filter_groups"] = {"enable": True, "metric": "entropy"}
    with pytest.raises(VerlConfigError, match="algorithm.filter_groups.metric='entropy'"):
        map_verl_config(config, gpu=False)


def test_keys_that_cannot_be_honoured_are_refused_by_name() -> None:
    config = copy.deepcopy(CALC_X)
    config["algorithm"].update(adv_estimator="gae", use_kl_in_reward=True)
    config["critic"] = {"optim": {"lr": 1e-5}}
    config["trainer"]["nnodes"] = 2
    config["actor_rollout_ref"]["model"]["lora_rank"] = 32
    with pytest.raises(VerlConfigError) as err:
        map_verl_config(config, gpu=False)
    message = str(err.value)
    for key in ("algorithm.adv_estimator='gae'", "algorithm.use_kl_in_reward=True", "critic.optim.lr", "trainer.nnodes=2",
                "actor_rollout_ref.model.lora_rank"):  # fmt: skip
        assert key in message


def test_trace_aggregation_keys_of_0_3_and_1_0_map_and_the_rest_are_refused_by_name() -> None:
    from agl_stream_trainer.config import TrainerConfig

    # 0.3.0's preview keys, as its docs enable them
    config = copy.deepcopy(CALC_X)
    config["agentlightning"] = {"trace_aggregator": {"level": "trajectory", "trajectory_max_prompt_length": 4096,
                                                     "trajectory_max_response_length": 34384, "debug": False,
                                                     "mismatch_log_dir": "./mismatch_cases"}}  # fmt: skip
    algorithm = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).algorithm
    assert algorithm.aggregation == "trajectory"
    assert (algorithm.max_prompt_length, algorithm.max_response_length) == (4096, 34384)  # the trajectory limits
    # v1.0's defaults: trajectory rows, advantage per rollout, the per-rollout mean loss
    config["agentlightning"]["trace_aggregator"] = {"level": "trajectory"}
    config["algorithm"]["enable_rollout_level_advantage"] = True
    config["actor_rollout_ref"]["actor"]["policy_loss"] = {"loss_mode": "per_rollout_mean"}
    algorithm = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).algorithm
    assert algorithm.loss_agg_mode == "rollout-mean-token-mean" and algorithm.rollout_advantage is True
    assert (algorithm.max_prompt_length, algorithm.max_response_length) == (4096, 2048)  # data.* when not given
    config["agentlightning"]["trace_aggregator"] = {"level": "transition"}
    config["actor_rollout_ref"]["actor"]["policy_loss"] = {"loss_mode": "vanilla"}
    algorithm = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).algorithm
    assert algorithm.aggregation == "transition" and algorithm.loss_agg_mode == "token-mean"
    # what does not map is named
    config["agentlightning"] = {"trace_aggregator": {"level": "step", "debug": True}, "max_ppo_update_times": 4}
    config["actor_rollout_ref"]["actor"]["policy_loss"] = {"loss_mode": "gspo"}
    with pytest.raises(VerlConfigError) as err:
        map_verl_config(config, gpu=False)
    for key in ("agentlightning.trace_aggregator.level='step'", "agentlightning.trace_aggregator.debug=True",
                "agentlightning.max_ppo_update_times", "actor_rollout_ref.actor.policy_loss.loss_mode='gspo'"):  # fmt: skip
        assert key in str(err.value)


def test_without_a_level_the_rows_are_trajectories_and_their_limits_apply() -> None:
    from agl_stream_trainer.config import TrainerConfig

    config = copy.deepcopy(CALC_X)
    config.pop("agentlightning", None)
    algorithm = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).algorithm
    assert algorithm.aggregation == "trajectory"  # ours and v1.0's default (0.3.0's was transition)
    assert (algorithm.max_prompt_length, algorithm.max_response_length) == (4096, 2048)  # data.*
    config["agentlightning"] = {"trace_aggregator": {"trajectory_max_response_length": 8192}}
    algorithm = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).algorithm
    assert (algorithm.aggregation, algorithm.max_response_length) == ("trajectory", 8192)
    config["agentlightning"]["trace_aggregator"]["level"] = "transition"  # per-call rows keep data.*'s limits
    algorithm = TrainerConfig.model_validate(map_verl_config(config, gpu=False)[0]).algorithm
    assert (algorithm.aggregation, algorithm.max_response_length) == ("transition", 2048)


def test_verl_returns_the_rl_algorithm_with_options() -> None:
    import agl_stream as agl

    config = copy.deepcopy(CALC_X)
    config["trainer"]["val_before_train"] = False
    algorithm = agl.VERL(config)
    assert isinstance(algorithm, agl.RL) and isinstance(algorithm, agl.Algorithm)
    assert algorithm.validate_before is False and algorithm.config.run_id == "calc_x"
