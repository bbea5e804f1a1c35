"""Dynamic sampling: groups whose rewards are all equal carry no GRPO signal; they are counted,
left out of batches (by default for group-normalized estimators), and a task with no signal at
all stops the learner with a clear error instead of spinning."""

from __future__ import annotations

import pytest
import torch

from agl_stream_trainer.algorithms.batch import collate, rows_from_trajectories
from agl_stream_trainer.algorithms.grpo import GRPOConfig, compute_advantages
from agl_stream_trainer.batching import BatcherConfig, GroupAssembler, NoLearningSignal
from agl_stream_trainer.config import TrainerConfig

from .conftest import make_group


def _cfg(**kw) -> BatcherConfig:
    base = dict(group_size=4, batch_groups=2, group_timeout_s=10.0, min_group_size=2, max_staleness=1, drop_zero_variance=True)
    base.update(kw)
    return BatcherConfig(**base)


def _add(asm: GroupAssembler, group: list) -> None:
    for t in group:
        asm.add(t, record=t.rollout_id, now=0.0)


def test_zero_variance_groups_are_left_out_and_the_batch_waits_for_signal() -> None:
    asm = GroupAssembler(_cfg())
    flat_zero, flat_half = make_group("z", [0, 0, 0, 0], seed=1), make_group("h", [0.5] * 4, seed=2)
    signal = make_group("s1", [1, 0, 0, 0], seed=3)
    for group in (flat_zero, signal, flat_half):
        _add(asm, group)
    assert asm.pop_batch(0, now=0.0) is None  # one group with signal is not a batch of two
    assert asm.stats.zero_variance_groups == 2
    assert sorted(asm.take_done()) == sorted(t.rollout_id for t in flat_zero + flat_half)  # released, never trained
    second = make_group("s2", [1, 1, 0, 1], seed=4)
    _add(asm, second)
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and batch.groups == 2 and batch.signal_groups == 2
    assert {t.group_id for t in batch.trajectories} == {"s1", "s2"}
    assert batch.zero_variance_groups == 2 and batch.zero_variance_fraction == pytest.approx(0.5)
    # every row of the batch now has a non-zero GRPO advantage
    tensors = collate(rows_from_trajectories(batch.trajectories), pad_token_id=0)
    adv = compute_advantages(tensors, GRPOConfig())
    assert bool((adv.abs().sum(dim=1) > 0).all())


def test_with_dropping_off_zero_variance_groups_train_and_are_still_counted() -> None:
    asm = GroupAssembler(_cfg(drop_zero_variance=False))
    flat, signal = make_group("z", [1, 1, 1, 1], seed=5), make_group("s", [1, 0, 1, 0], seed=6)
    _add(asm, flat)
    _add(asm, signal)
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and batch.groups == 2
    assert batch.signal_groups == 1 and batch.zero_variance_groups == 1 and batch.zero_variance_fraction == 0.5
    tensors = collate(rows_from_trajectories(batch.trajectories), pad_token_id=0)
    adv = compute_advantages(tensors, GRPOConfig())
    per_row = adv.abs().sum(dim=1) > 0
    assert int(per_row.sum()) == 4  # the flat group's four rows learn nothing


def test_rewards_equal_within_the_tolerance_count_as_no_signal() -> None:
    asm = GroupAssembler(_cfg(batch_groups=1, zero_variance_tolerance=1e-3))
    _add(asm, make_group("near", [0.5, 0.5004, 0.5, 0.4999], seed=7))
    assert asm.pop_batch(0, now=0.0) is None and asm.stats.zero_variance_groups == 1


def test_a_task_with_no_signal_stops_with_a_clear_error() -> None:
    asm = GroupAssembler(_cfg(batch_groups=1, max_zero_variance_groups=3))
    for i in range(2):
        _add(asm, make_group(f"z{i}", [0, 0, 0, 0], seed=10 + i))
    assert asm.pop_batch(0, now=0.0) is None  # two in a row: still waiting
    _add(asm, make_group("z2", [0, 0, 0, 0], seed=12))
    with pytest.raises(NoLearningSignal, match=r"3 groups in a row had all-equal rewards \(3 at reward 0\)"):
        asm.pop_batch(0, now=0.0)


def test_a_batch_resets_the_no_signal_streak() -> None:
    asm = GroupAssembler(_cfg(batch_groups=1, max_zero_variance_groups=2))
    _add(asm, make_group("z0", [1, 1, 1, 1], seed=20))
    _add(asm, make_group("s", [1, 0, 0, 0], seed=21))
    assert asm.pop_batch(0, now=0.0) is not None
    _add(asm, make_group("z1", [0, 0, 0, 0], seed=22))
    assert asm.pop_batch(0, now=0.0) is None  # one in a row since the batch: no error


def test_dropping_is_the_default_for_group_normalized_estimators_only() -> None:
    for estimator in ("grpo", "drgrpo", "rloo"):
        assert TrainerConfig(algorithm={"estimator": estimator}).batcher.drop_zero_variance is True
    assert TrainerConfig(algorithm={"estimator": "reinforce_plus_plus"}).batcher.drop_zero_variance is False
    explicit = TrainerConfig(algorithm={"estimator": "grpo"}, batcher={"drop_zero_variance": False})
    assert explicit.batcher.drop_zero_variance is False


def test_effective_batch_size_counts_rows_with_advantage() -> None:
    batch = collate(rows_from_trajectories(make_group("a", [1, 0, 1, 0], seed=30) + make_group("b", [0] * 4, seed=31)), 0)
    adv = compute_advantages(batch, GRPOConfig())
    assert int(((adv * batch.response_mask).abs().sum(dim=1) > 1e-8).sum()) == 4
    assert torch.equal(adv[4:], torch.zeros_like(adv[4:]))


def test_with_dropping_off_a_waiting_flat_group_is_counted_once() -> None:
    asm = GroupAssembler(_cfg(drop_zero_variance=False))
    _add(asm, make_group("z", [0, 0, 0, 0], seed=40))
    for _ in range(5):  # the learner polls while the batch waits for a second group
        assert asm.pop_batch(0, now=0.0) is None
    _add(asm, make_group("s", [1, 0, 0, 0], seed=41))
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and batch.zero_variance_groups == 1 and asm.stats.zero_variance_groups == 1
