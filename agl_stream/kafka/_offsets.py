"""Commit only what is done: offsets of a partition are committed up to the first unfinished record.

Records of one partition may finish out of order (several rollouts run concurrently, a sink
batch spans partitions). Kafka commits are positional, so the committable offset is the first
offset that is still pending; everything after it is replayed after a crash (at-least-once).
"""

from __future__ import annotations

from collections import deque
from typing import Hashable


class OffsetTracker:
    def __init__(self) -> None:
        self._pending: dict[Hashable, deque[int]] = {}
        self._done: dict[Hashable, set[int]] = {}
        self._next: dict[Hashable, int] = {}
        self._committed: dict[Hashable, int] = {}

    def delivered(self, partition: Hashable, offset: int) -> None:
        """A record was handed to the application (offsets of a partition arrive in increasing order)."""
        queue = self._pending.setdefault(partition, deque())
        if queue and offset <= queue[-1]:
            return  # redelivery of something already tracked (after a seek)
        queue.append(offset)

    def done(self, partition: Hashable, offset: int) -> None:
        queue = self._pending.get(partition)
        if not queue:
            return
        self._done.setdefault(partition, set()).add(offset)
        done = self._done[partition]
        while queue and queue[0] in done:
            finished = queue.popleft()
            done.discard(finished)
            self._next[partition] = finished + 1

    def position(self, partition: Hashable) -> int | None:
        """Where a restart must resume the partition: its first unfinished record, else one past the last
        finished one; None if nothing of it was delivered."""
        queue = self._pending.get(partition)
        return queue[0] if queue else self._next.get(partition)

    def done_ahead(self, partition: Hashable) -> list[int]:
        """Offsets already done past the partition's first unfinished record (a commit cannot cover them yet)."""
        return sorted(self._done.get(partition, ()))

    def committable(self) -> dict[Hashable, int]:
        """Offsets (next to read) that advanced since the last :meth:`committed` call."""
        return {tp: nxt for tp, nxt in self._next.items() if self._committed.get(tp) != nxt}

    def is_committed(self, partition: Hashable, offset: int) -> bool:
        return self._committed.get(partition, -1) > offset

    def committed_offset(self, partition: Hashable) -> int | None:
        """The last offset (next to read) committed for ``partition``; None if none since it was assigned."""
        return self._committed.get(partition)

    def committed(self, offsets: dict[Hashable, int]) -> None:
        self._committed.update(offsets)

    def pending_count(self, partition: Hashable | None = None) -> int:
        if partition is not None:
            return len(self._pending.get(partition, ()))
        return sum(len(q) for q in self._pending.values())

    def forget(self, partitions: list[Hashable]) -> None:
        """Drop state of partitions that were revoked (their records will be redelivered elsewhere)."""
        for tp in partitions:
            self._pending.pop(tp, None)
            self._done.pop(tp, None)
            self._next.pop(tp, None)
            self._committed.pop(tp, None)
