"""AttemptBuffer: completeness by span_count, grace period, late spans, abandoned attempts (pure logic)."""

from __future__ import annotations

from agl_stream.types import AttemptEvent, Span
from agl_stream_processors.triplets.buffer import AttemptBuffer, SpanOutcome

R, A = "ro-000000000001", "at-00000001"


def span(i: int, attempt: str = A) -> Span:
    return Span(rollout_id=R, attempt_id=attempt, sequence_id=i, trace_id="t" * 32, span_id=f"{i:016x}", name="s")


def finished(count: int | None, attempt: str = A) -> AttemptEvent:
    return AttemptEvent(kind="finished", rollout_id=R, attempt_id=attempt, status="succeeded", span_count=count)


def test_ready_only_when_finished_and_all_spans_arrived_in_any_order() -> None:
    buf = AttemptBuffer(grace_seconds=10)
    assert buf.add_span(span(1), "r1", 0, now=0.0) is SpanOutcome.BUFFERED
    assert buf.add_finished(finished(3), "f", 0, now=1.0)
    assert buf.take_ready(now=1.0) == []
    assert buf.add_span(span(2), "r2", 0, now=1.1) is SpanOutcome.BUFFERED
    assert buf.add_span(span(2), "r2b", 0, now=1.2) is SpanOutcome.DUPLICATE  # redelivered: not counted twice
    assert buf.take_ready(now=1.2) == []
    buf.add_span(span(3), "r3", 0, now=1.3)
    (item,) = buf.take_ready(now=1.3)
    assert item.complete and sorted(item.spans) == sorted(s.span_id for s in (span(1), span(2), span(3)))
    assert item.tokens == ["r1", "f", "r2", "r2b", "r3"]  # every source record is handed back to be marked done
    assert buf.pending == {}


def test_grace_period_adapts_with_what_arrived_and_later_spans_are_late() -> None:
    buf = AttemptBuffer(grace_seconds=5)
    buf.add_span(span(1), "r1", 0, now=0.0)
    buf.add_finished(finished(2), "f", 0, now=1.0)
    assert buf.take_ready(now=5.9) == []
    (item,) = buf.take_ready(now=6.0)
    assert not item.complete and len(item.spans) == 1
    assert buf.add_span(span(2), "r2", 0, now=7.0) is SpanOutcome.LATE
    assert not buf.add_finished(finished(2), "f2", 0, now=7.0)  # a repeated 'finished' is a duplicate


def test_missing_span_count_waits_for_the_grace_period_zero_count_is_immediate() -> None:
    buf = AttemptBuffer(grace_seconds=2)
    buf.add_finished(finished(None), "f", 0, now=0.0)
    assert buf.take_ready(now=1.0) == []
    assert len(buf.take_ready(now=2.0)) == 1
    buf.add_finished(finished(0, attempt="at-00000002"), "g", 0, now=3.0)
    (item,) = buf.take_ready(now=3.0)
    assert item.complete and item.spans == {}


def test_abandoned_attempts_and_revoked_partitions_leave_the_buffer() -> None:
    buf = AttemptBuffer(orphan_seconds=100)
    buf.add_span(span(1), "r1", 0, now=0.0)
    buf.add_span(span(1, attempt="at-00000002"), "r2", 1, now=50.0)
    (gone,) = buf.take_abandoned(now=100.0)
    assert gone.attempt_id == A and gone.tokens == ["r1"]
    assert [i.attempt_id for i in buf.drop_partitions(keep=[0])] == ["at-00000002"]
    assert buf.pending == {}


def test_an_attempt_is_not_abandoned_before_the_attempt_events_are_read_past_its_orphan_time() -> None:
    """A processor paused longer than ``orphan_seconds`` (or whose attempts partition stalled) has not read the
    ``finished`` events produced meanwhile: the clock alone must not abandon their attempts (the nemesis lost
    final trajectories that way: adapted later with no spans)."""
    buf = AttemptBuffer(orphan_seconds=15)
    buf.add_span(span(1), "r1", 0, now=0.0, produced_at=1000.0)
    # 20 s passed on the clock (a pause), but the attempt events were read only up to 1010.0
    assert buf.take_abandoned(now=20.0, attempts_read_through=1010.0) == []
    # the finished event was waiting: the attempt completes as usual
    buf.add_finished(finished(1), "f", 0, now=20.1)
    (item,) = buf.take_ready(now=20.1)
    assert item.complete
    # an attempt whose runner never reports is abandoned once the attempt events are read past its orphan time
    buf.add_span(span(1, attempt="at-00000002"), "r2", 0, now=30.0, produced_at=1030.0)
    assert buf.take_abandoned(now=45.0, attempts_read_through=1044.9) == []
    (gone,) = buf.take_abandoned(now=45.0, attempts_read_through=1045.0)
    assert gone.attempt_id == "at-00000002"
    # the clock still counts too: reading fast does not abandon an attempt seen a moment ago
    buf.add_span(span(1, attempt="at-00000003"), "r3", 0, now=50.0, produced_at=1000.0)
    assert buf.take_abandoned(now=51.0, attempts_read_through=2000.0) == []


def heartbeat(attempt: str = A) -> AttemptEvent:
    return AttemptEvent(kind="heartbeat", rollout_id=R, attempt_id=attempt)


def test_a_slow_attempt_whose_runner_heartbeats_is_not_abandoned() -> None:
    """The nemesis killed a broker node mid-attempt: the attempt took 24 s, heartbeating every second, and was
    abandoned 15 s after its first span; its buffered spans were dead-lettered, and when ``finished`` came it
    was adapted from the other 11 of 23 spans after the grace period. Silence is what makes an orphan."""
    buf = AttemptBuffer(orphan_seconds=15, grace_seconds=30)
    for i in range(12):
        buf.add_span(span(i), f"r{i}", 0, now=0.0, produced_at=1000.0)
    for t in range(1, 24):  # a heartbeat a second, read as produced
        buf.note_alive(R, A, now=float(t), produced_at=1000.0 + t)
        assert buf.take_abandoned(now=float(t), attempts_read_through=1000.0 + t) == []
    for i in range(12, 23):
        buf.add_span(span(i), f"r{i}", 0, now=24.0, produced_at=1024.0)
    buf.add_finished(finished(23), "f", 0, now=24.0, produced_at=1024.0)
    (item,) = buf.take_ready(now=24.0, read_through=1024.0)
    assert item.complete and len(item.spans) == 23
    # the runner dies: from its last sign of life, orphan_seconds on both clocks
    buf.add_span(span(1, attempt="at-00000002"), "x", 0, now=30.0, produced_at=1030.0)
    buf.note_alive(R, "at-00000002", now=35.0, produced_at=1035.0)
    assert buf.take_abandoned(now=49.0, attempts_read_through=2000.0) == []  # 14 s on the clock
    assert buf.take_abandoned(now=50.0, attempts_read_through=1049.9) == []  # 14.9 s in what was read
    (gone,) = buf.take_abandoned(now=50.0, attempts_read_through=1050.0)
    assert gone.attempt_id == "at-00000002"
    buf.note_alive(R, "at-00000003", now=51.0, produced_at=1051.0)  # a heartbeat alone buffers nothing
    assert buf.pending == {}


def test_remembered_attempts_expire_after_the_late_window() -> None:
    buf = AttemptBuffer(late_window_seconds=10)
    buf.add_finished(finished(0), "f", 0, now=0.0)
    buf.take_ready(now=0.0)
    assert buf.was_adapted(R, A)
    buf.add_finished(finished(0, attempt="at-00000002"), "g", 0, now=20.0)
    buf.take_ready(now=20.0)
    assert not buf.was_adapted(R, A) and buf.remembered == 1


def test_grace_period_ends_when_the_spans_are_read_past_it() -> None:
    """With a read-through time, the grace counts from the finished event's produce time on the read clock."""
    buf = AttemptBuffer(grace_seconds=5)
    buf.add_span(span(1), "t1", 0, now=1.0)
    buf.add_finished(finished(2), "f", 0, now=1.0, produced_at=1000.0)
    assert buf.take_ready(now=500.0, read_through=1004.0) == []  # the wall clock is far past; the spans are not
    (item,) = buf.take_ready(now=501.0, read_through=1005.0)
    assert not item.complete


def test_a_partition_that_moves_away_takes_what_was_remembered_about_its_attempts() -> None:
    """Its records are redelivered; if the partition comes back they must be taken as a new owner takes them
    (seen in the nemesis: a remembered attempt's redelivered 'finished' taken for a handled repeat, its spans
    dead-lettered as late, the trajectory never emitted or emitted from the rest of its spans)."""
    buf = AttemptBuffer()
    for i in (1, 2):
        buf.add_span(span(i), f"s{i}", 0, now=0.0)
    buf.add_finished(finished(2), "f", 0, now=0.0)
    other = "at-00000002"
    buf.add_span(span(1, attempt=other), "o1", 1, now=0.0)
    buf.add_finished(finished(1, attempt=other), "of", 1, now=0.0)
    assert {i.attempt_id for i in buf.take_ready(now=1.0)} == {A, other}
    buf.restore_adapted(R, "at-00000003", now=1.0, partition=0)
    assert buf.add_span(span(1), "again", 0, now=2.0) is SpanOutcome.LATE  # still ours: a late repeat
    buf.drop_partitions(keep=[1])  # partition 0 moved away
    assert buf.add_span(span(1), "redelivered", 0, now=3.0) is SpanOutcome.BUFFERED
    assert buf.add_finished(finished(2), "f-again", 0, now=3.0)
    assert buf.add_span(span(1, attempt="at-00000003"), "r3", 0, now=3.0) is SpanOutcome.BUFFERED
    assert buf.add_span(span(1, attempt=other), "o-again", 1, now=3.0) is SpanOutcome.LATE  # partition 1 stayed


def test_an_abandoned_attempt_is_remembered_from_its_first_span_and_its_spans_can_be_put_back() -> None:
    buf = AttemptBuffer(orphan_seconds=5, grace_seconds=30, late_window_seconds=100)
    for i in range(3):
        buf.add_span(span(i), f"r{i}", 2, now=0.0)
    (gone,) = buf.take_abandoned(now=5.0)
    buf.remember_abandoned(gone, 40, now=5.0)
    assert buf.abandoned_from(R, A) == 40
    buf.add_span(span(3), "r3", 2, now=6.0)  # it speaks again, then falls silent a second time
    (again,) = buf.take_abandoned(now=11.0)
    buf.remember_abandoned(again, 57, now=11.0)
    assert buf.abandoned_from(R, A) == 40, "its spans start where they started the first time"
    buf.add_span(span(4), "r4", 2, now=12.0)
    assert buf.add_finished(finished(5), "f", 2, now=12.0)
    assert buf.recover_spans(R, A, [span(i) for i in range(5)] + [span(9, attempt="at-other")]) == 4
    assert buf.abandoned_from(R, A) is None
    (item,) = buf.take_ready(now=12.0)
    assert item.complete and len(item.spans) == 5
    buf.remember_abandoned(item, None, now=13.0)  # no span: nothing to read again
    assert buf.abandoned_from(R, A) is None


def test_abandoned_attempts_are_forgotten_with_their_partition_and_after_the_late_window() -> None:
    buf = AttemptBuffer(orphan_seconds=5, late_window_seconds=100)
    buf.add_span(span(1), "r1", 2, now=0.0)
    buf.add_span(span(1, attempt="at-00000002"), "r2", 3, now=0.0)
    for item in buf.take_abandoned(now=5.0):
        buf.remember_abandoned(item, 7, now=5.0)
    buf.drop_partitions([3])
    assert buf.abandoned_from(R, A) is None and buf.abandoned_from(R, "at-00000002") == 7
    buf.add_span(span(1, attempt="at-00000003"), "r3", 3, now=200.0)
    (late,) = buf.take_abandoned(now=205.0)
    buf.remember_abandoned(late, 9, now=205.0)  # the first one is past the late window now
    assert buf.abandoned_from(R, "at-00000002") is None and buf.abandoned_from(R, "at-00000003") == 9
