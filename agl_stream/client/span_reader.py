"""Where ``StoreClient.query_spans`` reads spans from: a small interface and what a query asks.

Spans are written to ``agl.spans`` and stored by the span sink; a reader answers queries over the
stored spans and tells how far the sinks got with one attempt, so the client can give upstream's
read-your-writes (``query_spans`` right after a rollout reads ``succeeded`` returns all its spans).
:class:`~agl_stream.client.clickhouse_reader.ClickHouseSpanReader` reads the ClickHouse ``spans``
table; another store (the read-only SQL door of a local stack, say) only has to implement this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Protocol, Sequence

from agl_stream.client.paging import PaginatedResult
from agl_stream.types import Span

#: span fields ``query_spans`` filters on (exact value and/or substring), as upstream
FILTER_FIELDS: tuple[str, ...] = ("trace_id", "span_id", "parent_id", "name")
#: span fields ``query_spans`` sorts by
SORT_FIELDS: tuple[str, ...] = (
    "sequence_id", "start_time", "end_time", "name", "trace_id", "span_id", "parent_id", "rollout_id", "attempt_id",
)  # fmt: skip


@dataclass(frozen=True)
class SpanQuery:
    """One ``query_spans`` call with ``attempt_id`` already resolved (None: every attempt)."""

    rollout_id: str
    attempt_id: Optional[str] = None
    exact: dict[str, str] = field(default_factory=dict)  # field -> value
    contains: dict[str, str] = field(default_factory=dict)  # field -> substring
    filter_logic: Literal["and", "or"] = "and"
    sort_by: Optional[str] = "sequence_id"
    sort_order: Literal["asc", "desc"] = "asc"
    limit: int = -1
    offset: int = 0

    def __post_init__(self) -> None:
        for name in (*self.exact, *self.contains):
            if name not in FILTER_FIELDS:
                raise ValueError(f"cannot filter spans by {name!r}; filters: {', '.join(FILTER_FIELDS)}")
        if self.sort_by is not None and self.sort_by not in SORT_FIELDS:
            raise ValueError(f"cannot sort spans by {self.sort_by!r}; sortable fields: {', '.join(SORT_FIELDS)}")


@dataclass(frozen=True)
class AttemptProgress:
    """How many spans the attempt's runner reported (``finished``; None until stored) and how many are stored."""

    expected: Optional[int]
    stored: int
    #: the attempt finished without a span count (a writer that cannot know it, e.g. the store front door
    #: when the runner's spans went through another replica): nothing more to wait for once it is stored
    finished_uncounted: bool = False

    @property
    def complete(self) -> bool:
        if self.expected is None:
            return self.finished_uncounted
        return self.stored >= self.expected


class SpanReader(Protocol):
    async def read_spans(self, query: SpanQuery) -> PaginatedResult[Span]:
        """The spans matching ``query``, sorted and paginated; ``total`` counts all matches."""
        ...

    async def attempt_progress(self, rollout_id: str, attempt_id: str) -> AttemptProgress:
        """The runner's span count for the attempt (from its stored ``finished`` event) and the spans stored."""
        ...

    async def missing_span_ids(self, rollout_id: str, attempt_id: str, span_ids: Sequence[str]) -> set[str]:
        """Which of ``span_ids`` are not stored yet."""
        ...

    async def count_spans(self) -> int:
        """Every stored span (for ``statistics``)."""
        ...

    async def close(self) -> None: ...
