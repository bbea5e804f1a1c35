"""``StoreClient``: upstream's ``LightningStore`` API on the pipeline (topics, the state machine, ClickHouse).

Method names, arguments, return types and semantics are upstream's (``agentlightning.store.base``),
so an algorithm or a hand-written runner written against the store ports by swapping the object.
``docs/store-api.md`` lists every method with how it maps and the few it refuses.

* **Writes become topic records.** Rollouts go to ``agl.tasks`` (their first attempt pre-assigned),
  resources to the compacted ``agl.resources`` (under their id and under ``latest``), spans to
  ``agl.spans``, attempt updates to ``agl.attempts`` as the same ``AttemptEvent`` records a runner
  writes, so they flow through the same state machine; cancellation is a ``RolloutControl``.
* **Reads** come from the state machine's snapshots (the compacted ``agl.rollouts``, followed from
  the start), the resources and workers topics, and, for spans, a :class:`SpanReader` over
  ClickHouse. Where upstream reads its own writes, so does the client: its writes enter its view at
  once, ``update_attempt(succeeded)`` of a running attempt returns at the broker's acknowledgement and reads
  back succeeded at once (the state machine's rule for it is fixed), other outcomes and ``update_rollout`` return
  once the state machine applied them, and
  ``query_spans`` of a finished attempt waits until the sinks stored every span its runner reported.
* **What a stream cannot do** as upstream raises :class:`UnsupportedOnStream` naming the alternative.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from agl_stream.client.errors import UnsupportedOnStream
from agl_stream.client.follow import TopicFollower
from agl_stream.client.resources import ResourceCache
from agl_stream.client.rollout_history import RolloutHistory
from agl_stream.client.rollout_view import RolloutView
from agl_stream.client.span_feed import SpanFeed
from agl_stream.client.span_reader import SpanReader
from agl_stream.client.store.base import CONTROL_HEADER, FINISHED_BY_RUNNER, TRACER_NAME, WATCHDOG_STATUSES
from agl_stream.client.store.resources import ResourceStore
from agl_stream.client.store.rollout_reads import RolloutReads
from agl_stream.client.store.rollout_writes import RolloutWrites
from agl_stream.client.store.spans import AttemptWrites, SpanStore
from agl_stream.client.store.workers import WorkerStore
from agl_stream.client.task_queue import TaskQueue
from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.types import EnqueueRolloutRequest, RolloutSnapshot, Worker

__all__ = ["CONTROL_HEADER", "FINISHED_BY_RUNNER", "TRACER_NAME", "WATCHDOG_STATUSES", "EnqueueRolloutRequest", "StoreClient"]


class StoreClient(RolloutWrites, RolloutReads, SpanStore, ResourceStore, WorkerStore):
    """Async client; use as ``async with StoreClient(settings) as store: ...``.

    ``rollout_history`` answers reads of finished rollouts older than the view's window (``store_recent_rollouts``;
    default: ClickHouse, opened on first use). ``span_reader`` answers ``query_spans`` (default: ClickHouse at ``settings.effective_clickhouse_dsn``,
    opened on first use); with a ``span_feed`` (a store front door's), the spans of recent rollouts are answered
    from ``agl.spans`` as read, without ClickHouse (:mod:`agl_stream.client.span_feed`). ``consistency_timeout`` bounds how long a read waits for the pipeline to
    reflect a write (:class:`ConsistencyTimeout` after that). ``linger_ms``: how long the producer gathers records
    before sending them (a front door's 0: each of its calls waits for its own acknowledgement).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        bootstrap: Optional[str] = None,
        span_reader: Optional[SpanReader] = None,
        consistency_timeout: float = 30.0,
        dequeue_poll_timeout: float = 0.5,
        dequeue_idle_seconds: float = 30.0,
        span_feed: Optional[SpanFeed] = None,
        rollout_history: Optional[RolloutHistory] = None,
        linger_ms: int = 5,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.consistency_timeout = consistency_timeout
        self._producer = RecordProducer(settings, bootstrap, linger_ms=linger_ms)
        self.resources = ResourceCache(settings, bootstrap=bootstrap)
        # live rollouts and the last `store_recent_rollouts` finished ones; older ones are read from ClickHouse
        self.view = RolloutView(max_finished=settings.store_recent_rollouts or None, on_evict=self._forget)
        # writes wait for the state machine's answer on agl.rollouts (read-your-writes): a latency-critical hop
        self._rollouts = TopicFollower(settings, "rollouts", RolloutSnapshot, self.view.apply, bootstrap=bootstrap,
                                       latency_critical=True)  # fmt: skip
        self._workers: dict[str, Worker] = {}
        self._workers_follower: Optional[TopicFollower[Worker]] = None
        self._span_reader = span_reader
        self._owns_reader = span_reader is None
        self._span_feed = span_feed  # recent rollouts' spans from agl.spans, read before ClickHouse (a front door's)
        self.span_reads: Counter[str] = Counter()
        self._writes: dict[str, dict[str, AttemptWrites]] = {}
        self._rollout_history = rollout_history
        self._owns_history = rollout_history is None
        self._tasks = TaskQueue(settings, self._producer, bootstrap=bootstrap, poll_timeout=dequeue_poll_timeout,
                                idle_seconds=dequeue_idle_seconds)  # fmt: skip
        self._started = False

    # ================================================================= lifecycle

    async def start(self) -> "StoreClient":
        if not self._started:
            await self._producer.start()
            await self.resources.start()
            await self._rollouts.start()
            if self._span_feed is not None:
                await self._span_feed.start()
            self._started = True
        return self

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            await self._tasks.stop()
            await self._producer.stop()
        finally:
            await self.resources.stop()
            await self._rollouts.stop()
            if self._span_feed is not None:
                await self._span_feed.stop()
            if self._workers_follower is not None:
                await self._workers_follower.stop()
            if self._span_reader is not None and self._owns_reader:
                await self._span_reader.close()
            if self._rollout_history is not None and self._owns_history:
                await self._rollout_history.close()

    def _forget(self, rollout_id: str) -> None:
        """The view forgot a finished rollout: so does the rest of the client (its spans' ids written here)."""
        self._writes.pop(rollout_id, None)

    close = stop  # upstream name

    @property
    def span_feed(self) -> Optional[SpanFeed]:
        """The feed that answers ``query_spans`` for recent rollouts, when this client has one."""
        return self._span_feed

    async def __aenter__(self) -> "StoreClient":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ================================================================= capabilities and statistics

    @property
    def capabilities(self) -> dict[str, bool]:
        """Upstream's ``LightningStoreCapabilities``: async-safe; one client per process and event loop."""
        return {"thread_safe": False, "async_safe": True, "zero_copy": False, "otlp_traces": bool(self._otlp_endpoint())}

    def otlp_traces_endpoint(self) -> str:
        """The OTLP/HTTP traces endpoint (the ingest receiver) named by ``AGL_OTLP_ENDPOINT``."""
        endpoint = self._otlp_endpoint()
        if not endpoint:
            raise UnsupportedOnStream("otlp_traces_endpoint", "no OTLP receiver is configured (AGL_OTLP_ENDPOINT is unset)",
                                      "`agl-stream ingest otlp` and AGL_OTLP_ENDPOINT=http://host:4318/v1/traces")  # fmt: skip
        return endpoint

    @staticmethod
    def _otlp_endpoint() -> Optional[str]:
        return Settings.from_env().otlp_endpoint

    async def statistics(self) -> dict[str, Any]:
        """Counts of what this client sees (``total_spans`` only when a span reader is reachable)."""
        stats: dict[str, Any] = {
            "name": type(self).__name__,
            "total_rollouts": len(self.view),
            "total_attempts": self.view.count_attempts(),
            "total_resources": len(self.resources.all()),
            "total_workers": len(self._workers),
        }
        if self._span_reader is not None:
            stats["total_spans"] = await self._span_reader.count_spans()
        return stats
