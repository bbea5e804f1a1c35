"""Sequence ids for spans whose sender did not number them, by upstream's rules.

Upstream's store hands out ``sequence_id`` from one counter per *rollout* (its attempts share it,
so a retried attempt continues where the previous one stopped), starting at 1, and a span added
with its own id moves that counter up to it. The ingest servers have no store, so each process
keeps such a counter per rollout; ids a client supplies (``agentlightning.span_sequence_id`` or
the ``x-sequence-id`` header) always win and move the counter past them, so locally issued ids
never go backwards behind supplied ones. Memory is bounded: the least recently used rollouts are
forgotten beyond ``max_rollouts``. One allocator belongs to one event loop (not thread-safe by
design: each server process has its own).

Under ``--workers N`` or several replicas, a rollout whose requests land on different processes
is numbered by each of them, so numbers can repeat (upstream allows one id for several spans).
Agents that need one strict order send ``x-sequence-id`` or the span attribute.
"""

from __future__ import annotations

from collections import OrderedDict

#: the first id upstream's store issues for a rollout (0.3.0: its counter starts at 0, each id is +1)
FIRST_SEQUENCE_ID = 1


class SequenceAllocator:
    def __init__(self, max_rollouts: int = 100_000, first: int = FIRST_SEQUENCE_ID) -> None:
        self.max_rollouts = max_rollouts
        self.first = first
        self._last: OrderedDict[str, int] = OrderedDict()

    def next(self, rollout_id: str, attempt_id: str) -> int:
        """The next id of the rollout: one above the highest seen or issued so far.

        ``attempt_id`` is taken, as by upstream's ``get_next_span_sequence_id``, but the counter is
        the rollout's."""
        value = self._last.get(rollout_id, self.first - 1) + 1
        self._remember(rollout_id, value)
        return value

    def observe(self, rollout_id: str, attempt_id: str, sequence_id: int) -> None:
        """Record an id a client supplied, so later issued ids come after it."""
        self._remember(rollout_id, max(sequence_id, self._last.get(rollout_id, self.first - 1)))

    def _remember(self, rollout_id: str, value: int) -> None:
        last = self._last
        last[rollout_id] = value
        last.move_to_end(rollout_id)
        if len(last) > self.max_rollouts:
            last.popitem(last=False)
