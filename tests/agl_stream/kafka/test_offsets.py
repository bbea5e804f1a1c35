"""OffsetTracker: commit positions never pass an unfinished record."""

from __future__ import annotations

from agl_stream.kafka import OffsetTracker


def test_commit_point_stops_at_first_unfinished_record() -> None:
    t = OffsetTracker()
    assert t.position("p0") is None
    for off in (10, 11, 12, 13):
        t.delivered("p0", off)
    t.done("p0", 12)
    assert t.committable() == {} and t.position("p0") == 10 and t.done_ahead("p0") == [12]
    t.done("p0", 10)
    assert t.committable() == {"p0": 11} and t.position("p0") == 11
    t.done("p0", 11)
    assert t.committable() == {"p0": 13} and t.position("p0") == 13 and t.done_ahead("p0") == []
    t.committed({"p0": 13})
    assert t.committable() == {}
    t.done("p0", 13)
    assert t.committable() == {"p0": 14} and t.position("p0") == 14
    assert t.pending_count() == 0


def test_partitions_are_independent_and_forgettable() -> None:
    t = OffsetTracker()
    t.delivered("a", 0)
    t.delivered("b", 5)
    t.done("b", 5)
    assert t.committable() == {"b": 6}
    t.forget(["a", "b"])
    assert t.committable() == {} and t.pending_count() == 0


def test_redelivery_after_seek_is_not_double_tracked() -> None:
    t = OffsetTracker()
    t.delivered("p", 1)
    t.delivered("p", 1)
    t.done("p", 1)
    assert t.committable() == {"p": 2} and t.pending_count("p") == 0


def test_is_committed_only_past_the_committed_position() -> None:
    t = OffsetTracker()
    for off in (3, 4):
        t.delivered("p0", off)
    t.done("p0", 4)
    assert not t.is_committed("p0", 3) and not t.is_committed("p0", 4)
    t.done("p0", 3)
    t.committed(t.committable())
    assert t.is_committed("p0", 3) and t.is_committed("p0", 4)
    assert not t.is_committed("p0", 5)
    t.forget(["p0"])
    assert not t.is_committed("p0", 3), "a revoked partition's commits are no longer this consumer's to trust"
