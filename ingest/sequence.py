"""Per-attempt sequence ids for spans whose sender did not number them.

Upstream's store hands out ``sequence_id`` from one counter per (rollout, attempt). The ingest
servers have no store, so each process keeps its own counter per attempt; ids a client supplies
(``agentlightning.span_sequence_id`` or the ``x-sequence-id`` header) always win and move the
counter past them, so locally assigned ids never go backwards behind supplied ones. Memory is
bounded: the least recently used attempts are forgotten beyond ``max_attempts``. One allocator
belongs to one event loop (not thread-safe by design: each server process has its own).

Under ``--workers N`` an attempt whose calls land on different workers is numbered by each of
them, so numbers can repeat across workers (upstream allows one id for several spans, ordered
by time). Agents that need one strict order send ``x-sequence-id`` or the span attribute.
"""

from __future__ import annotations

from collections import OrderedDict


class SequenceAllocator:
    def __init__(self, max_attempts: int = 100_000, first: int = 1) -> None:
        self.max_attempts = max_attempts
        self.first = first
        self._last: OrderedDict[tuple[str, str], int] = OrderedDict()

    def next(self, rollout_id: str, attempt_id: str) -> int:
        """The next id of this attempt: one above the highest seen or assigned so far."""
        key = (rollout_id, attempt_id)
        value = self._last.get(key, self.first - 1) + 1
        self._remember(key, value)
        return value

    def observe(self, rollout_id: str, attempt_id: str, sequence_id: int) -> None:
        """Record an id a client supplied, so later local ids come after it."""
        key = (rollout_id, attempt_id)
        self._remember(key, max(sequence_id, self._last.get(key, self.first - 1)))

    def _remember(self, key: tuple[str, str], value: int) -> None:
        last = self._last
        last[key] = value
        last.move_to_end(key)
        if len(last) > self.max_attempts:
            last.popitem(last=False)
