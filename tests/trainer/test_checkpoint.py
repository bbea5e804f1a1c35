"""Checkpoints round-trip model, optimizer, LR schedule, version and offsets; the latest pointer is atomic."""

from __future__ import annotations

import torch

from agl_stream_trainer.algorithms.batch import collate, rows_from_trajectories
from agl_stream_trainer.algorithms.grpo import GRPOConfig, train_step
from agl_stream_trainer.backends.hf import HFPolicy, OptimConfig
from agl_stream_trainer.checkpoint import CheckpointManager, TrainerState

from .conftest import make_group


def test_save_load_roundtrip(tiny, tiny_model_dir, tmp_path) -> None:
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer = tiny
    optim = OptimConfig(lr=1e-3, warmup_steps=3)
    policy = HFPolicy(model, optim)
    batch = collate(rows_from_trajectories(make_group("g", [1.0, 0.0], seed=1)), tokenizer.pad_token_id)
    train_step(policy, batch, GRPOConfig())
    manager = CheckpointManager(tmp_path / "ck", keep=2)
    for step in (1, 2, 3):
        saved = TrainerState(step=step, policy_version=step, offsets={"t.triplets:0": 5 * step}, extra={"k": step},
                             done_offsets={"t.triplets:0": [5 * step + 2]}, settled_rollouts=[f"ro-{step}", "ro-x"])
        manager.save(policy, saved)
    assert sorted(p.name for p in (tmp_path / "ck").glob("step-*")) == ["step-00000002", "step-00000003"]

    model2, _, _ = load_model_and_tokenizer(str(tiny_model_dir))
    restored = HFPolicy(model2, optim)
    state = manager.load(restored)
    assert state is not None and state.policy_version == 3 and state.offsets == {"t.triplets:0": 15}
    assert state.extra == {"k": 3} and state.done_offsets == {"t.triplets:0": [17]}
    assert state.settled_rollouts == ["ro-3", "ro-x"]
    for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert torch.equal(a, b), name
    sa, sb = policy.optimizer.state_dict(), restored.optimizer.state_dict()
    for idx, values in sa["state"].items():
        for key, value in values.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(sb["state"][idx][key])), (idx, key)
    assert restored.lr == policy.lr and restored.scheduler.last_epoch == policy.scheduler.last_epoch
    # training continues identically from the restored state
    train_step(policy, batch, GRPOConfig())
    train_step(restored, batch, GRPOConfig())
    for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)


def test_no_checkpoint_means_fresh_start(tiny, tmp_path) -> None:
    model, _ = tiny
    assert CheckpointManager(tmp_path / "none").load(HFPolicy(model, OptimConfig())) is None
