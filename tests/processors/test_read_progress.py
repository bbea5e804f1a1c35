"""ReadProgress: the read-through time a processor's timers judge silence by (pure logic)."""

from __future__ import annotations

from agl_stream_processors.read_progress import ReadProgress


def test_caught_up_partitions_read_through_their_last_fetch() -> None:
    progress = ReadProgress()
    progress.fetched(0, position=10, end=10, polled_at=99.5)
    progress.fetched(1, position=4, end=4, polled_at=99.8)
    assert progress.read_through(100.0) == 99.5
    assert progress.lag_seconds(100.0) == 0.5


def test_a_partition_behind_reads_through_its_latest_record() -> None:
    progress = ReadProgress()
    progress.fetched(0, position=10, end=10, polled_at=99.9)
    progress.consumed(1, produced_at=40.0)
    progress.consumed(1, produced_at=41.0)
    progress.fetched(1, position=500, end=9000, polled_at=99.9)  # a backlog: 8,500 records unread
    assert progress.read_through(100.0) == 41.0


def test_a_partition_whose_fetches_stop_keeps_its_last_fetch_time() -> None:
    """A paused process, or a leader it cannot reach: no fetch, so silence is not judged past it."""
    progress = ReadProgress()
    progress.fetched(0, position=10, end=10, polled_at=50.0)
    assert progress.read_through(400.0) == 50.0


def test_unknown_partitions_read_as_nothing_read_and_moved_ones_are_forgotten() -> None:
    progress = ReadProgress()
    assert progress.read_through(100.0) == 100.0  # no partition: nothing to wait for
    progress.fetched(0, position=None, end=10, polled_at=99.0)
    progress.fetched(1, position=3, end=3, polled_at=99.0)
    assert progress.read_through(100.0) == 0.0 and progress.lag_seconds(100.0) is None
    progress.keep({1})
    assert progress.read_through(100.0) == 99.0


def test_read_committed_end_of_minus_one_is_not_caught_up() -> None:
    """aiokafka reports last_stable_offset -1 without read-committed isolation: never taken for an end."""
    progress = ReadProgress()
    progress.consumed(0, produced_at=70.0)
    progress.fetched(0, position=5, end=-1, polled_at=99.0)
    assert progress.read_through(100.0) == 70.0


class _RebalancingConsumer:
    """aiokafka's per-partition questions on a consumer whose group revokes partition 1 during an await
    (a rebalance lands while ``position`` waits): each asserts the partition is still assigned, as aiokafka does."""

    def __init__(self) -> None:
        self.assigned = {0, 1, 2}

    def assignment(self) -> set[int]:
        return set(self.assigned)

    def _check(self, tp: int) -> None:
        assert tp in self.assigned, "Partition is not assigned"

    async def position(self, tp: int) -> int:
        self._check(tp)
        if tp == 1:
            self.assigned.discard(1)  # the rebalance, while this await was pending
        return 5

    def highwater(self, tp: int) -> int:
        self._check(tp)
        return 5

    def last_stable_offset(self, tp: int) -> int:
        self._check(tp)
        return 5

    def last_poll_timestamp(self, tp: int) -> int:
        self._check(tp)
        return 99_000


async def test_a_partition_revoked_around_the_fetch_is_skipped_not_a_crash() -> None:
    """Seen in the nemesis: the triplet processor exited with aiokafka's AssertionError('Partition is not
    assigned') when a rebalance revoked a partition between its fetch and the progress note."""
    from agl_stream_processors.read_progress import note_fetches

    consumer = _RebalancingConsumer()
    progress = ReadProgress()
    # partition 3 was revoked before the call; partition 1 while its position was awaited
    await note_fetches(progress, consumer, [0, 1, 2, 3], read_committed=False)
    progress.keep({0, 2})
    assert progress.read_through(100.0) == 99.0  # partitions 0 and 2 noted, caught up at the fetch
