"""The spans of recent rollouts, held in memory as their records arrived: ``query_spans`` without a ClickHouse round trip.

A store front door follows ``agl.spans`` (every partition, no consumer group) and keeps each record's bytes under
its rollout, in arrival order. A query decodes the rollout's records, keeps the last copy of each span (what the
``spans`` table's deduplication keeps) and filters, sorts and pages them as the ClickHouse reader does.

**Which rollouts it answers for** ("recent"): those it holds whole. The feed starts reading at the partitions'
ends at ``began_at``, and evicts whole rollouts, oldest first, to stay within its bounds. So a rollout whose enqueue
time is later than both ``began_at`` and the first record of the last rollout evicted, by more than ``margin``, has
every one of its spans here (or none yet); any other rollout is read from ClickHouse, which stays the answer for
history. ``margin`` (5 s) covers clock differences between the machines that write rollouts and spans (NTP keeps
them within milliseconds).

**Bounds**: ``max_bytes`` of record bytes (256 MiB by default) and ``max_rollouts`` (100,000); records are kept
as bytes, so a query pays for decoding only the rollout it asks about.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from agl_stream.client.paging import PaginatedResult
from agl_stream.client.span_reader import SpanQuery
from agl_stream.serialization import RecordError, decode
from agl_stream.types import Span

#: clock differences between the writers of spans and of rollouts, allowed for when deciding what is held whole
COVERAGE_MARGIN_S = 5.0


@dataclass
class _Rollout:
    first_seen: float  # the first record's timestamp (seconds)
    records: list[bytes] = field(default_factory=list)
    size: int = 0


def _time_key(value: Optional[float]) -> float:
    return math.inf if value is None else value  # a missing time sorts last (upstream's rule for *_time fields)


#: sort field -> the span's value, as the ClickHouse reader orders them
_SORT_VALUE: dict[str, Callable[[Span], Any]] = {
    "sequence_id": lambda s: s.sequence_id,
    "start_time": lambda s: _time_key(s.start_time),
    "end_time": lambda s: _time_key(s.end_time),
    "name": lambda s: s.name,
    "trace_id": lambda s: s.trace_id,
    "span_id": lambda s: s.span_id,
    "parent_id": lambda s: s.parent_id or "",
    "rollout_id": lambda s: s.rollout_id,
    "attempt_id": lambda s: s.attempt_id,
}
_FILTER_VALUE: dict[str, Callable[[Span], str]] = {
    "trace_id": lambda s: s.trace_id,
    "span_id": lambda s: s.span_id,
    "parent_id": lambda s: s.parent_id or "",
    "name": lambda s: s.name,
}


def _matches(span: Span, query: SpanQuery) -> bool:
    tests = [_FILTER_VALUE[name](span) == value for name, value in query.exact.items()]
    tests += [value in _FILTER_VALUE[name](span) for name, value in query.contains.items()]
    if not tests:
        return True
    return all(tests) if query.filter_logic == "and" else any(tests)


def _tie_break(span: Span) -> tuple[int, float, str]:
    return (span.sequence_id, _time_key(span.start_time), span.span_id)


def answer(spans: list[Span], query: SpanQuery) -> PaginatedResult[Span]:
    """Filter, sort and page one rollout's spans (one copy each) the way the ClickHouse reader does."""
    selected = [s for s in spans if (query.attempt_id is None or s.attempt_id == query.attempt_id) and _matches(s, query)]
    selected.sort(key=_tie_break)  # ties of the sort field: sequence id, start time, span id, all ascending
    if query.sort_by is not None:
        selected.sort(key=_SORT_VALUE[query.sort_by], reverse=query.sort_order == "desc")  # stable: ties keep the above
    total = len(selected)
    end = None if query.limit == -1 else query.offset + query.limit
    return PaginatedResult(selected[query.offset:end], query.limit, query.offset, total)


class RecentSpans:
    """Record bytes of ``agl.spans`` per rollout, bounded; see the module doc for what it answers for."""

    def __init__(self, began_at: float, *, max_bytes: int = 256 * 1024 * 1024, max_rollouts: int = 100_000,
                 margin: float = COVERAGE_MARGIN_S) -> None:  # fmt: skip
        self.began_at = began_at
        self.max_bytes = max_bytes
        self.max_rollouts = max_rollouts
        self.margin = margin
        self._rollouts: OrderedDict[str, _Rollout] = OrderedDict()  # in order of first record
        self.bytes = 0
        self.evicted_rollouts = 0
        self.undecodable = 0
        self._evicted_through = 0.0  # the first record time of the latest rollout evicted

    @property
    def covered_from(self) -> float:
        """Rollouts enqueued after this time (seconds) are held whole."""
        return max(self.began_at, self._evicted_through) + self.margin

    def covers(self, rollout_start_time: Optional[float]) -> bool:
        return rollout_start_time is not None and rollout_start_time > self.covered_from

    def add(self, rollout_id: str, raw: bytes, timestamp: float) -> None:
        """One record of ``agl.spans`` (its value bytes, its timestamp in seconds)."""
        held = self._rollouts.get(rollout_id)
        if held is None:
            held = self._rollouts[rollout_id] = _Rollout(first_seen=timestamp)
        held.records.append(raw)
        held.size += len(raw)
        self.bytes += len(raw)
        while self._rollouts and (self.bytes > self.max_bytes or len(self._rollouts) > self.max_rollouts):
            self._evict_oldest()

    def forget_all(self, now: float) -> None:
        """Drop everything and answer only for rollouts enqueued from ``now`` on (the feed starts, or lost records)."""
        self._rollouts.clear()
        self.bytes = 0
        self.began_at = max(self.began_at, now)

    def _evict_oldest(self) -> None:
        _, oldest = self._rollouts.popitem(last=False)
        self.bytes -= oldest.size
        self.evicted_rollouts += 1
        self._evicted_through = max(self._evicted_through, oldest.first_seen)

    def spans(self, rollout_id: str) -> list[Span]:
        """The rollout's spans, the last copy of each (per attempt and span id), in arrival order of that copy."""
        held = self._rollouts.get(rollout_id)
        if held is None:
            return []
        latest: dict[tuple[str, str], Span] = {}
        for raw in held.records:
            try:
                span = decode(raw, Span)
            except RecordError:  # the span sink dead-letters it; it is not a span of this rollout for anyone
                self.undecodable += 1
                continue
            key = (span.attempt_id, span.span_id)
            latest.pop(key, None)
            latest[key] = span
        return list(latest.values())

    def read(self, query: SpanQuery) -> PaginatedResult[Span]:
        return answer(self.spans(query.rollout_id), query)

    @property
    def rollouts(self) -> int:
        return len(self._rollouts)
