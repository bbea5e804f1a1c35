"""How far a processor has read its inputs, as a time: the clock its timers judge silence by.

A timer that judges silence by the wall clock ("no heartbeat for 60 s", "no span 30 s after
``finished``") is wrong whenever the processor lags: after a restart or a pause, the records that
prove an attempt alive are on the topic, unread, while the wall clock runs on. The nemesis found the
state machine requeuing live attempts by the hundred after a processors restart, and the triplet
processor adapting attempts before it had read their spans. Judged by *read progress*, silence only
counts once the processor has read what was produced in that time.

Per partition, the *read-through* time is the time before which every record was read:
- caught up (the consumer's position is at the end the last fetch response reported: the high
  watermark, or the last stable offset for read-committed consumers): the time of that fetch;
- behind: the produce time (record timestamp) of the latest record processed;
- neither known yet (nothing fetched or processed since the partition was assigned): unknown, which
  reads as "nothing read".
A processor's read-through time is the earliest over its partitions. A partition whose fetches fail
(its leader unreachable) stays at its last fetch, so silence is not judged while records may be
waiting there. Produce times come from the producers' clocks; skew between hosts shifts the judgement
by the skew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Optional

#: how often a consumer loop notes where it stands (a fetch's position and end): its clock may trail by this much
PROGRESS_INTERVAL_S = 0.5


@dataclass
class _Partition:
    caught_up_at: Optional[float] = None  # time of the fetch that showed nothing more to read
    last_produced: Optional[float] = None  # produce time of the latest record processed


class ReadProgress:
    def __init__(self) -> None:
        self._partitions: dict[Hashable, _Partition] = {}

    def consumed(self, partition: Hashable, produced_at: Optional[float]) -> None:
        """A record of ``partition``, produced at ``produced_at`` (epoch seconds), was processed."""
        state = self._partitions.setdefault(partition, _Partition())
        if produced_at is not None:
            state.last_produced = produced_at if state.last_produced is None else max(state.last_produced, produced_at)

    def fetched(self, partition: Hashable, position: Optional[int], end: Optional[int], polled_at: Optional[float]) -> None:
        """The consumer is at ``position``; the fetch at ``polled_at`` (epoch seconds) said the partition ends at ``end``."""
        state = self._partitions.setdefault(partition, _Partition())
        caught_up = position is not None and end is not None and end >= 0 and polled_at is not None and position >= end
        state.caught_up_at = polled_at if caught_up else None

    def keep(self, partitions: set[Hashable]) -> None:
        """Only these partitions are this processor's now (a rebalance moved the others away)."""
        for gone in set(self._partitions) - partitions:
            del self._partitions[gone]

    def read_through(self, now: float) -> float:
        """Epoch time before which every record of every partition was read (``now`` with no partition;
        0.0 when a partition is unknown)."""
        earliest = now
        for state in self._partitions.values():
            at = state.caught_up_at if state.caught_up_at is not None else state.last_produced
            earliest = min(earliest, at if at is not None else 0.0)
        return min(earliest, now)

    def lag_seconds(self, now: float) -> Optional[float]:
        """``now - read_through``, None while a partition is unknown (for health reports)."""
        through = self.read_through(now)
        return None if through == 0.0 else max(0.0, now - through)


async def note_fetches(progress: ReadProgress, consumer: Any, partitions: Iterable[Any], *, read_committed: bool,
                       key: Callable[[Any], Hashable] = lambda tp: tp) -> None:  # fmt: skip
    """Tell ``progress`` where an aiokafka consumer stands on these assigned partitions, after a ``getmany``.

    aiokafka's position skips transaction markers and is the offset of the next record *returned*
    (not prefetched), so ``position >= end`` means everything up to the fetch was handed out.
    """
    for tp in partitions:
        # A rebalance can revoke a partition at any await (here, or between the fetch and this call); aiokafka
        # then asserts on every per-partition question. Revoked means no longer ours: nothing to note.
        if tp not in consumer.assignment():
            continue
        try:
            position = await consumer.position(tp)
        except Exception:  # noqa: BLE001 - unassigned meanwhile, or no position yet: unknown, not caught up
            position = None
        if tp not in consumer.assignment():
            continue
        end = consumer.last_stable_offset(tp) if read_committed else consumer.highwater(tp)
        polled = consumer.last_poll_timestamp(tp)
        progress.fetched(key(tp), position, end, polled / 1000.0 if polled is not None else None)
