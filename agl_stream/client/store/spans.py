"""Spans: written to ``agl.spans`` with the sequence ids and counts this client keeps per attempt; read from the
span feed when the client has one and holds the rollout (:mod:`agl_stream.client.span_feed`), else from ClickHouse
through a :class:`~agl_stream.client.span_reader.SpanReader` once they are all stored."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Optional, Sequence, Union

from agl_stream.client.errors import ConsistencyTimeout
from agl_stream.client.paging import PaginatedResult, check_paging
from agl_stream.client.span_reader import SpanQuery, SpanReader
from agl_stream.client.store.base import FINISHED_BY_RUNNER, TRACER_NAME, StoreBase
from agl_stream.types import Attempt, Span

if TYPE_CHECKING:
    from agl_stream.client.span_feed import SpanFeed


class AttemptWrites:
    """What this client wrote for one attempt: the sequence counter, span count and ids (for read-your-writes)."""

    __slots__ = ("next_sequence", "span_count", "span_ids")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.span_count = 0
        self.span_ids: set[str] = set()


#: how long a query waits for the span feed to read what was acknowledged before it (then ClickHouse answers)
RECENT_SPANS_TIMEOUT = 5.0


class SpanStore(StoreBase):
    _span_reader: Optional[SpanReader]
    _span_feed: Optional["SpanFeed"]
    #: query_spans answers by source: "recent" (the span feed), "clickhouse", and "recent_not_caught_up" (of those
    #: read from ClickHouse, the rollouts the feed held but had not read far enough in time)
    span_reads: Counter[str]
    #: rollout -> attempt -> what this client wrote for it; dropped with the rollout when the view forgets it
    _writes: dict[str, dict[str, AttemptWrites]]
    get_latest_attempt: Callable[[str], Awaitable[Optional[Attempt]]]  # RolloutReads
    query_attempts: Callable[..., Awaitable[PaginatedResult[Attempt]]]  # RolloutReads

    def _spans_written(self, rollout_id: str, attempt_id: str) -> int:
        writes = self._writes.get(rollout_id, {}).get(attempt_id)
        return writes.span_count if writes else 0

    def _attempt_writes(self, rollout_id: str, attempt_id: str) -> AttemptWrites:
        snap = self._require_rollout(rollout_id)
        by_attempt = self._writes.setdefault(rollout_id, {})
        if attempt_id not in by_attempt:
            known = {a.attempt_id for a in self.view.attempts(rollout_id)}
            if snap.attempt is not None:
                known.add(snap.attempt.attempt_id)
            if attempt_id not in known:
                raise ValueError(f"attempt {attempt_id} not found for rollout {rollout_id}")
            by_attempt[attempt_id] = AttemptWrites()
        return by_attempt[attempt_id]

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """The next sequence id (1, 2, ...) for spans this process writes for the attempt.

        On a stream the process that runs an attempt allocates its sequence ids (the runner does for
        its own attempts); this counter is for attempts this client runs (dequeued or started here)."""
        writes = self._attempt_writes(rollout_id, attempt_id)
        writes.next_sequence += 1
        return writes.next_sequence

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return [await self.get_next_span_sequence_id(rid, aid) for rid, aid in rollout_attempt_ids]

    async def add_span(self, span: Span) -> Optional[Span]:
        """Write a span to ``agl.spans`` (a heartbeat; the first one makes the attempt ``running``).

        None when this client already wrote a span with the same id for the attempt (a duplicate)."""
        added = await self.add_many_spans([span])
        return added[0] if added else None

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        fresh: list[Span] = []
        for span in spans:
            writes = self._attempt_writes(span.rollout_id, span.attempt_id)
            if span.span_id in writes.span_ids:
                continue
            writes.span_ids.add(span.span_id)
            writes.span_count += 1
            writes.next_sequence = max(writes.next_sequence, span.sequence_id)
            fresh.append(span)
        if fresh:
            await self._producer.send_many(self.settings.topic("spans"), [(s.rollout_id, s) for s in fresh])
        return fresh

    async def add_otel_span(self, rollout_id: str, attempt_id: str, readable_span: Any,
                            sequence_id: Optional[int] = None) -> Optional[Span]:  # fmt: skip
        """Convert an OpenTelemetry ``ReadableSpan`` and add it (a sequence id is allocated when none is given)."""
        from agl_stream.tracer.convert import readable_to_span

        if sequence_id is None:
            sequence_id = await self.get_next_span_sequence_id(rollout_id, attempt_id)
        span = readable_to_span(readable_span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id,
                                tracer_name=TRACER_NAME)  # fmt: skip
        return await self.add_span(span)

    def _reader(self) -> SpanReader:
        if self._span_reader is None:
            from agl_stream.client.clickhouse_reader import ClickHouseSpanReader

            self._span_reader = ClickHouseSpanReader(self.settings.effective_clickhouse_dsn)
        return self._span_reader

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: Optional[Union[str, Literal["latest"]]] = None,
        *,
        trace_id: Optional[str] = None,
        trace_id_contains: Optional[str] = None,
        span_id: Optional[str] = None,
        span_id_contains: Optional[str] = None,
        parent_id: Optional[str] = None,
        parent_id_contains: Optional[str] = None,
        name: Optional[str] = None,
        name_contains: Optional[str] = None,
        filter_logic: Literal["and", "or"] = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
    ) -> PaginatedResult[Span]:
        """Stored spans of a rollout (one attempt, ``"latest"``, or all), filtered, sorted and paginated as upstream.

        Read-your-writes: for every selected attempt a runner reported finished (``succeeded`` or
        ``failed``), it first waits until the sinks stored as many spans as the runner reported, and
        for spans this client added, until those are stored."""
        check_paging(limit, offset, sort_order, filter_logic)
        resolved: Optional[str] = attempt_id
        if attempt_id == "latest":
            latest = await self.get_latest_attempt(rollout_id)  # a rollout the view forgot: from the history
            if latest is None:
                return PaginatedResult([], limit, offset, 0)
            resolved = latest.attempt_id
        exact = {k: v for k, v in (("trace_id", trace_id), ("span_id", span_id), ("parent_id", parent_id), ("name", name))
                 if v is not None}  # fmt: skip
        contains = {k: v for k, v in (("trace_id", trace_id_contains), ("span_id", span_id_contains),
                                      ("parent_id", parent_id_contains), ("name", name_contains)) if v is not None}  # fmt: skip
        spec = SpanQuery(rollout_id, resolved, exact, contains, filter_logic, sort_by, sort_order, limit, offset)
        feed = self._span_feed
        if feed is not None:
            rollout = self.view.rollout(rollout_id)
            if feed.spans.covers(rollout.start_time if rollout is not None else None):
                if await feed.caught_up_to_now(timeout=RECENT_SPANS_TIMEOUT):
                    self.span_reads["recent"] += 1
                    return feed.spans.read(spec)
                self.span_reads["recent_not_caught_up"] += 1  # the feed's log says why; ClickHouse has them all
        self.span_reads["clickhouse"] += 1
        reader = self._reader()
        await self._await_spans(reader, rollout_id, resolved)
        return await reader.read_spans(spec)

    async def _await_spans(self, reader: SpanReader, rollout_id: str, attempt_id: Optional[str]) -> None:
        attempts = self.view.attempts(rollout_id)
        if not attempts and not self.view.knows(rollout_id) and self.view.evicted:
            attempts = list(await self.query_attempts(rollout_id))  # a rollout the view forgot: its attempts' history
        if attempt_id is not None:
            attempts = [a for a in attempts if a.attempt_id == attempt_id]
            if not attempts:  # this client's view has not seen the attempt yet (it lags the state machine)
                attempts = [Attempt(rollout_id=rollout_id, attempt_id=attempt_id)]
        deadline = time.monotonic() + self.consistency_timeout
        for attempt in attempts:
            finished_here = attempt.status in FINISHED_BY_RUNNER
            own = self._writes.get(rollout_id, {}).get(attempt.attempt_id)
            delay = 0.05
            while True:
                # A finished event already stored counts even where this client's view has not seen it yet (a
                # reader told "succeeded" by another client): then its span count is waited for too.
                progress = await reader.attempt_progress(rollout_id, attempt.attempt_id)
                must_complete = finished_here or progress.expected is not None
                missing = await reader.missing_span_ids(rollout_id, attempt.attempt_id, sorted(own.span_ids)) if own else set()
                if (not must_complete or progress.complete) and not missing:
                    break
                if time.monotonic() > deadline:
                    detail = f"{progress.stored} of {progress.expected} spans" if must_complete else ""
                    raise ConsistencyTimeout(
                        f"spans of attempt {attempt.attempt_id} (rollout {rollout_id}) not all stored within "
                        f"{self.consistency_timeout:.0f}s ({detail}{', ' if detail and missing else ''}"
                        f"{len(missing)} added here missing{'' if missing else ' none'}); are the sinks running? "
                        "rejected spans are in the dead_letters table"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
