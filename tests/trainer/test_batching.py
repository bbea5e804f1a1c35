"""Group assembly: complete groups, straggler timeouts, failed rollouts, retries and the staleness bound."""

from __future__ import annotations

from agl_stream.types import Trajectory
from agl_stream_trainer.batching import BatcherConfig, GroupAssembler

from .conftest import make_group


def _cfg(**kw) -> BatcherConfig:
    base = dict(group_size=4, batch_groups=2, group_timeout_s=10.0, min_group_size=2, max_staleness=1)
    base.update(kw)
    return BatcherConfig(**base)


def test_batches_hold_only_complete_groups() -> None:
    asm = GroupAssembler(_cfg())
    g1, g2 = make_group("g1", [1, 0, 1, 0], seed=1), make_group("g2", [1, 1, 0, 0], seed=2)
    for t in g1 + g2[:3]:
        asm.add(t, record=t.rollout_id, now=0.0)
    assert asm.pop_batch(0, now=1.0) is None  # g2 is still missing a member
    asm.add(g2[3], record=g2[3].rollout_id, now=1.0)
    batch = asm.pop_batch(0, now=1.0)
    assert batch is not None and batch.groups == 2 and len(batch.trajectories) == 8
    assert sorted(batch.records) == sorted(t.rollout_id for t in g1 + g2)
    assert asm.pending_groups == 0


def test_straggler_timeout_and_tiny_groups_dropped() -> None:
    asm = GroupAssembler(_cfg(batch_groups=1))
    late = make_group("late", [1, 0, 1, 0], seed=3)
    lonely = make_group("lonely", [1, 0, 0, 0], seed=4)
    for t in late[:3]:
        asm.add(t, record=t.rollout_id, now=0.0)
    asm.add(lonely[0], record="lonely", now=0.0)
    assert asm.pop_batch(0, now=5.0) is None
    batch = asm.pop_batch(0, now=10.5)  # both timed out: 3 members train, the lone one is dropped
    assert batch is not None and {t.rollout_id for t in batch.trajectories} == {t.rollout_id for t in late[:3]}
    assert asm.stats.timed_out_groups == 2 and asm.stats.dropped_groups == 1
    assert asm.take_done() == ["lonely"]


def test_failed_rollouts_count_as_arrived_but_never_train() -> None:
    asm = GroupAssembler(_cfg(batch_groups=1))
    group = make_group("f", [1, 0, 1, 0], seed=5)
    group[1] = group[1].model_copy(update={"status": "failed", "triplets": []})
    for t in group:
        asm.add(t, record=t.rollout_id, now=0.0)
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and len(batch.trajectories) == 3
    assert group[1].rollout_id in batch.records  # its record is released with the batch
    assert asm.stats.failed_rollouts == 1


def test_retry_replaces_failed_attempt_and_replays_are_ignored() -> None:
    asm = GroupAssembler(_cfg(group_size=2, batch_groups=1))
    a, b = make_group("r", [1, 0], seed=6)
    failed = a.model_copy(update={"status": "failed", "attempt_id": "at-1"})
    retry = a.model_copy(update={"attempt_id": "at-2", "attempt_sequence_id": 2})
    asm.add(failed, record="failed", now=0.0)
    asm.add(retry, record="retry", now=0.0)
    asm.add(retry, record="replay", now=0.0)
    asm.add(b, record="b", now=0.0)
    assert asm.take_done() == ["failed"]  # the replay's record waits for its member's group (same offset, maybe)
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and sorted(batch.records) == ["b", "replay", "retry"]
    assert len(batch.trajectories) == 2  # the replay never trains
    assert asm.stats.duplicates == 1 and asm.stats.failed_rollouts == 1


def test_staleness_bound_drops_and_counts_old_triplets() -> None:
    asm = GroupAssembler(_cfg(group_size=3, batch_groups=1, max_staleness=2))
    group = make_group("s", [1, 0, 1], seed=7, turns=2, versions=[10, 8, 7])
    for t in group:
        asm.add(t, record=t.rollout_id, now=0.0)
    batch = asm.pop_batch(10, now=0.0)
    assert batch is not None
    versions = sorted(tr.policy_version for t in batch.trajectories for tr in t.triplets)
    assert versions == [8, 8, 10, 10]  # version 7 is 3 behind 10 > 2
    assert asm.stats.stale_triplets == 2 and asm.stats.stale_trajectories == 1
    assert sorted(batch.staleness) == [0, 0, 2, 2] and asm.stats.staleness == {0: 2, 2: 2}


def test_non_train_modes_and_ungrouped_rollouts() -> None:
    asm = GroupAssembler(_cfg(batch_groups=1, min_group_size=1))
    val = make_group("v", [1], seed=8)[0].model_copy(update={"mode": "val"})
    asm.add(val, record="val", now=0.0)
    assert asm.take_done() == ["val"] and asm.stats.skipped_mode == 1
    solo = Trajectory(**{**make_group("x", [1.0], seed=9)[0].model_dump(), "group_id": None, "metadata": {}})
    asm.add(solo, record="solo", now=0.0)
    batch = asm.pop_batch(0, now=0.0)  # a rollout without a group is a group of one
    assert batch is not None and batch.records == ["solo"]


def test_only_the_attempt_that_ended_the_rollout_trains_in_either_arrival_order() -> None:
    """A retried attempt whose runner reported late is ``superseded``: never a member, whenever it arrives."""
    for late_first in (False, True):
        asm = GroupAssembler(_cfg(group_size=2, batch_groups=1))
        a, b = make_group("s", [1, 0], seed=8)
        final = a.model_copy(update={"attempt_id": "at-2", "attempt_sequence_id": 2, "decision": "final",
                                     "rollout_status": "succeeded"})  # fmt: skip
        superseded = a.model_copy(update={"attempt_id": "at-1", "decision": "superseded", "rollout_status": "requeuing"})
        undecided = b.model_copy(update={"attempt_id": "at-9", "decision": "undecided", "rollout_status": None})
        arrivals = [superseded, final] if late_first else [final, superseded]
        for t in [*arrivals, undecided, b]:
            asm.add(t, record=(t.rollout_id, t.attempt_id), now=0.0)
        assert sorted(asm.take_done()) == sorted([(superseded.rollout_id, "at-1"),
                                                  (undecided.rollout_id, "at-9")])  # fmt: skip
        batch = asm.pop_batch(0, now=0.0)
        assert batch is not None
        assert sorted((t.rollout_id, t.attempt_id) for t in batch.trajectories) == sorted(
            [(final.rollout_id, "at-2"), (b.rollout_id, b.attempt_id)]
        )
        assert (asm.stats.superseded, asm.stats.undecided) == (1, 1)


def test_a_final_trajectory_of_a_cancelled_rollout_is_a_member_that_never_trains() -> None:
    asm = GroupAssembler(_cfg(group_size=2, batch_groups=1, min_group_size=1))
    a, b = make_group("c", [1, 0], seed=9)
    cancelled = a.model_copy(update={"decision": "final", "rollout_status": "cancelled"})
    for t in (cancelled, b):
        asm.add(t, record=t.rollout_id, now=0.0)
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and [t.rollout_id for t in batch.trajectories] == [b.rollout_id]
    assert asm.stats.failed_rollouts == 1


def test_a_trajectory_published_again_after_its_group_left_is_a_duplicate_not_a_new_group() -> None:
    """agl.triplets is at-least-once: a restarted triplet processor publishes some trajectories again, after
    their group trained (seen in the nemesis: five groups trained twice). Dropped groups count as settled too."""
    asm = GroupAssembler(_cfg(group_size=2, batch_groups=1, remember_rollouts=3))
    trained, dropped = make_group("t", [1, 0], seed=7), make_group("d", [1, 0], seed=8)
    for t in trained:
        asm.add(t, record=f"first-{t.rollout_id}", now=0.0)
    assert asm.pop_batch(0, now=0.0) is not None
    asm.add(dropped[0], record="lonely", now=0.0)
    assert asm.pop_batch(0, now=100.0) is None  # timed out with one member: dropped
    asm.take_done()
    for t in [*trained, dropped[0]]:
        asm.add(t, record=f"again-{t.rollout_id}", now=101.0)
    assert asm.pending_groups == 0 and asm.stats.duplicates == 3
    assert sorted(asm.take_done()) == sorted(f"again-{t.rollout_id}" for t in [*trained, dropped[0]])
    assert asm.settled() == [trained[0].rollout_id, trained[1].rollout_id, dropped[0].rollout_id]
    asm.remember(["x"])  # the memory is bounded: the oldest is forgotten
    assert asm.settled() == [trained[1].rollout_id, dropped[0].rollout_id, "x"]


def test_a_replay_of_a_member_still_assembling_keeps_its_offset_unfinished() -> None:
    """After a rebalance (a learner paused past its session) the partition is read again from the committed
    offset: the same offsets come back. A replay of a member whose group is still assembling must not finish
    that offset, or the next checkpoint's position would pass a record never trained (lost at a resume)."""
    from agl_stream.kafka._offsets import OffsetTracker

    asm, tracker, tp = GroupAssembler(_cfg(group_size=2, batch_groups=1)), OffsetTracker(), "triplets:0"
    pending, trained = make_group("pending", [1, 0], seed=8), make_group("trained", [1, 0], seed=9)
    arrivals = [(0, pending[0]), (1, trained[0]), (2, trained[1])]

    def read(rows: list[tuple[int, Trajectory]]) -> None:
        for offset, trajectory in rows:
            tracker.delivered(tp, offset)
            asm.add(trajectory, record=offset, now=0.0)
        for offset in asm.take_done():
            tracker.done(tp, offset)

    read(arrivals)
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and sorted(batch.records) == [1, 2]
    for offset in batch.records:
        tracker.done(tp, offset)
    assert tracker.position(tp) == 0
    tracker.forget([tp])  # revoked, then assigned back: read again from the committed offset (0)
    read(arrivals)
    assert tracker.position(tp) == 0, "the pending member's offset is not finished by its replay"
    assert asm.stats.duplicates == 3
    read([(3, pending[1])])
    batch = asm.pop_batch(0, now=0.0)
    assert batch is not None and sorted(batch.records) == [0, 0, 3] and len(batch.trajectories) == 2
    for offset in batch.records:
        tracker.done(tp, offset)
    assert tracker.position(tp) == 4
