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
  once, ``update_attempt``/``update_rollout`` return once the state machine applied them, and
  ``query_spans`` of a finished attempt waits until the sinks stored every span its runner reported.
* **What a stream cannot do** as upstream raises :class:`UnsupportedOnStream` naming the alternative.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, Literal, Optional, Sequence, Union


from agl_stream.client.errors import ConsistencyTimeout, UnsupportedOnStream
from agl_stream.client.follow import TopicFollower
from agl_stream.client.paging import UNSET, PaginatedResult, Unset, check_paging, query
from agl_stream.client.resources import LATEST_KEY, ResourceCache
from agl_stream.client.rollout_view import RolloutView
from agl_stream.client.span_reader import SpanQuery, SpanReader
from agl_stream.client.task_queue import TaskQueue
from agl_stream.config import Settings
from agl_stream.ids import generate_attempt_id, generate_resources_id, generate_rollout_id
from agl_stream.kafka import RecordProducer
from agl_stream.kafka import LOW_LATENCY_FETCH_WAIT_MS
from agl_stream.kafka.claim import CLAIMED_HEADER
from agl_stream.types import (
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptEvent,
    AttemptStatus,
    EnqueueRolloutRequest,
    NamedResources,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutControl,
    RolloutMode,
    RolloutSnapshot,
    RolloutStatus,
    Span,
    Worker,
    WorkerStatus,
)

#: header that marks control records on agl.attempts (read by the rollout state machine)
CONTROL_HEADER = "agl-kind"
#: attempt statuses only the state machine's watchdog sets
WATCHDOG_STATUSES = frozenset({"timeout", "unresponsive"})
FINISHED_BY_RUNNER = frozenset({"succeeded", "failed"})
TRACER_NAME = "agl-stream-store-client"


class _AttemptWrites:
    """What this client wrote for one attempt: the sequence counter, span count and ids (for read-your-writes)."""

    __slots__ = ("next_sequence", "span_count", "span_ids")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.span_count = 0
        self.span_ids: set[str] = set()


class StoreClient:
    """Async client; use as ``async with StoreClient(settings) as store: ...``.

    ``span_reader`` answers ``query_spans`` (default: ClickHouse at ``settings.effective_clickhouse_dsn``,
    opened on first use). ``consistency_timeout`` bounds how long a read waits for the pipeline to
    reflect a write (:class:`ConsistencyTimeout` after that).
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
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.consistency_timeout = consistency_timeout
        self._producer = RecordProducer(settings, bootstrap)
        self.resources = ResourceCache(settings, bootstrap=bootstrap)
        self.view = RolloutView()
        # writes wait for the state machine's answer on agl.rollouts (read-your-writes): a latency-critical hop
        self._rollouts = TopicFollower(settings, "rollouts", RolloutSnapshot, self.view.apply, bootstrap=bootstrap,
                                       fetch_max_wait_ms=LOW_LATENCY_FETCH_WAIT_MS)  # fmt: skip
        self._workers: dict[str, Worker] = {}
        self._workers_follower: Optional[TopicFollower[Worker]] = None
        self._span_reader = span_reader
        self._owns_reader = span_reader is None
        self._writes: dict[tuple[str, str], _AttemptWrites] = {}
        self._tasks = TaskQueue(settings, self._producer, bootstrap=bootstrap, poll_timeout=dequeue_poll_timeout,
                                idle_seconds=dequeue_idle_seconds)  # fmt: skip
        self._started = False

    # ================================================================= lifecycle

    async def start(self) -> "StoreClient":
        if not self._started:
            await self._producer.start()
            await self.resources.start()
            await self._rollouts.start()
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
            if self._workers_follower is not None:
                await self._workers_follower.stop()
            if self._span_reader is not None and self._owns_reader:
                await self._span_reader.close()

    close = stop  # upstream name

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

    # ================================================================= rollouts: write

    async def enqueue_rollout(
        self,
        input: Any,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        (rollout,) = await self.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata or {})]
        )
        return rollout

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest | dict[str, Any]]) -> list[Rollout]:
        """Enqueue rollouts (status ``queuing``, first attempt pre-assigned); returns once the broker has them."""
        tasks = [self._new_task(r if isinstance(r, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(r))
                 for r in rollouts]  # fmt: skip
        await self._producer.send_many(self.settings.topic("tasks"), [(task.rollout_id, task) for task in tasks])
        for task in tasks:
            self.view.provisional(task, task.attempt)
        return [Rollout.model_validate(task.model_dump(exclude={"attempt"})) for task in tasks]

    def _new_task(self, req: EnqueueRolloutRequest, status: RolloutStatus = "queuing",
                  worker_id: Optional[str] = None) -> AttemptedRollout:  # fmt: skip
        now = time.time()
        rollout_id = generate_rollout_id()
        attempt = Attempt(rollout_id=rollout_id, attempt_id=generate_attempt_id(), sequence_id=1, start_time=now,
                          worker_id=worker_id)  # fmt: skip
        return AttemptedRollout(
            rollout_id=rollout_id, input=req.input, start_time=now, mode=req.mode, resources_id=req.resources_id,
            status=status, config=(req.config or RolloutConfig()).model_copy(deep=True), metadata=dict(req.metadata),
            attempt=attempt,
        )  # fmt: skip

    async def start_rollout(
        self,
        input: Any,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
        worker_id: Optional[str] = None,
    ) -> AttemptedRollout:
        """Create a rollout and its first attempt for the caller to run now, bypassing the queue.

        The task is written to ``agl.tasks`` marked as claimed (runners skip it; the state machine
        learns its config) and its attempt reported ``started``; status ``preparing``."""
        if resources_id is None and (latest := self.resources.latest()) is not None:
            resources_id = latest.resources_id
        req = EnqueueRolloutRequest(input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata or {})
        return await self._start_claimed(self._new_task(req, "preparing", worker_id), worker_id)

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        """A new attempt (``sequence_id`` + 1, ``preparing``) of a rollout, for the caller to run now."""
        self._require_rollout(rollout_id)
        # The state machine must know the current attempt before a later one appears: its records and
        # the new attempt's travel on different topics, and a span cannot tell which attempt number it has.
        snap = await self._await_view(rollout_id, lambda s: True, "the rollout's earlier writes")
        if snap.rollout.status in TERMINAL_ROLLOUT_STATUSES:
            raise UnsupportedOnStream(
                "start_attempt", f"rollout {rollout_id} is {snap.rollout.status}; the state machine keeps terminal "
                "rollouts terminal (late events of a finished rollout are ignored)",
                "enqueue_rollout / start_rollout with the same input",
            )  # fmt: skip
        sequence_id = max(snap.attempts, snap.attempt.sequence_id if snap.attempt else 0) + 1
        attempt = Attempt(rollout_id=rollout_id, attempt_id=generate_attempt_id(), sequence_id=sequence_id,
                          worker_id=worker_id)  # fmt: skip
        task = AttemptedRollout(**snap.rollout.model_copy(update={"status": "preparing"}).model_dump(), attempt=attempt)
        return await self._start_claimed(task, worker_id)

    async def _start_claimed(self, task: AttemptedRollout, worker_id: Optional[str]) -> AttemptedRollout:
        await self._producer.send_and_wait(self.settings.topic("tasks"), task, key=task.rollout_id,
                                           headers={CLAIMED_HEADER: worker_id or "store-client"})  # fmt: skip
        await self._send_event(task, "started", worker_id=worker_id)
        self.view.provisional(task, task.attempt)
        return task

    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> Optional[AttemptedRollout]:
        """Claim the next task from ``agl.tasks`` as a member of the runners' consumer group; None if none is there now."""
        found = await self.dequeue_many_rollouts(limit=1, worker_id=worker_id)
        return found[0] if found else None

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: Optional[str] = None) -> list[AttemptedRollout]:
        claimed = await self._tasks.dequeue(limit, worker_id)
        for task in claimed:
            self.view.provisional(task, task.attempt)
        return claimed

    async def update_rollout(
        self,
        rollout_id: str,
        input: Any = UNSET,
        mode: Union[Optional[RolloutMode], Unset] = UNSET,
        resources_id: Union[Optional[str], Unset] = UNSET,
        status: Union[RolloutStatus, Unset] = UNSET,
        config: Union[RolloutConfig, Unset] = UNSET,
        metadata: Union[Optional[dict[str, Any]], Unset] = UNSET,
    ) -> Rollout:
        """Only ``status="cancelled"`` applies on a stream (a ``RolloutControl`` the state machine applies);
        returns the rollout once the state machine cancelled it."""
        fields = {"input": input, "mode": mode, "resources_id": resources_id, "config": config, "metadata": metadata}
        changed = [name for name, value in fields.items() if not isinstance(value, Unset)]
        if changed:
            raise UnsupportedOnStream(
                "update_rollout", f"{', '.join(changed)} of a rollout cannot change: its task record on agl.tasks is "
                "immutable and may already be running", "cancel it (status='cancelled') and enqueue_rollout a new one",
            )  # fmt: skip
        snap = self._require_rollout(rollout_id)
        if isinstance(status, Unset) or status == snap.rollout.status:
            return snap.rollout
        if status != "cancelled":
            raise UnsupportedOnStream(
                "update_rollout", f"status {status!r} is the state machine's to set (it follows the latest attempt)",
                "update_attempt(status='succeeded'|'failed') for outcomes, status='cancelled' to stop a rollout, "
                "start_attempt or RolloutConfig(retry_condition, max_attempts) to run it again",
            )  # fmt: skip
        if snap.rollout.status in TERMINAL_ROLLOUT_STATUSES:
            raise ValueError(f"rollout {rollout_id} is already {snap.rollout.status}; a terminal rollout cannot be cancelled")
        control = RolloutControl(rollout_id=rollout_id)
        await self._producer.send_and_wait(self.settings.topic("attempts"), control, key=rollout_id,
                                           headers={CONTROL_HEADER: "control"})  # fmt: skip
        done = await self._await_view(rollout_id, lambda s: s.rollout.status in TERMINAL_ROLLOUT_STATUSES, "cancelled")
        return done.rollout

    async def cancel_rollout(self, rollout_id: str, reason: Optional[str] = None) -> None:
        """Ask the state machine to cancel a rollout without waiting (``update_rollout(status="cancelled")`` waits)."""
        control = RolloutControl(rollout_id=rollout_id, reason=reason)
        await self._producer.send_and_wait(self.settings.topic("attempts"), control, key=rollout_id,
                                           headers={CONTROL_HEADER: "control"})  # fmt: skip

    # ================================================================= attempts: write

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: Union[str, Literal["latest"]],
        status: Union[AttemptStatus, Unset] = UNSET,
        worker_id: Union[str, Unset] = UNSET,
        last_heartbeat_time: Union[float, Unset] = UNSET,
        metadata: Union[Optional[dict[str, Any]], Unset] = UNSET,
        *,
        span_count: Union[Optional[int], Unset] = UNSET,
    ) -> Attempt:
        """Report an attempt's progress as the runner's ``AttemptEvent`` records.

        ``succeeded``/``failed`` -> ``finished`` (with the number of spans this client added, so the
        triplet processor knows when it has them all; returns once the state machine applied it);
        ``preparing``/``running`` or a ``worker_id`` -> ``started`` (an attempt becomes ``running`` with
        its first span, as upstream's ``add_span``); ``last_heartbeat_time`` alone -> ``heartbeat``.
        ``timeout``/``unresponsive`` are the watchdog's (``RolloutConfig``) and are refused.
        ``span_count`` (agl-stream only) overrides the count a ``finished`` carries: None when the caller
        cannot know it (consumers then wait their grace period instead of a count).
        """
        if not isinstance(status, Unset) and status in WATCHDOG_STATUSES:
            raise UnsupportedOnStream(
                "update_attempt", f"status {status!r} is set by the state machine's watchdog, not by writers",
                "RolloutConfig(timeout_seconds=..., unresponsive_seconds=...) on the rollout, or status='failed'",
            )  # fmt: skip
        snap = self._require_rollout(rollout_id)
        attempt = self._resolve_attempt(snap, attempt_id)
        updates: dict[str, Any] = {}
        if not isinstance(worker_id, Unset):
            updates["worker_id"] = worker_id
        if not isinstance(metadata, Unset):
            updates["metadata"] = dict(metadata or {})
        if not isinstance(last_heartbeat_time, Unset):
            updates["last_heartbeat_time"] = last_heartbeat_time
        if not isinstance(status, Unset):
            updates["status"] = status
            if status in FINISHED_BY_RUNNER:
                updates["end_time"] = time.time()
        updated = attempt.model_copy(update=updates)
        task = self._task_of(snap, updated)
        event_meta = dict(updated.metadata)
        if not isinstance(status, Unset) and status in FINISHED_BY_RUNNER:
            if isinstance(span_count, Unset):
                writes = self._writes.get((rollout_id, updated.attempt_id))
                span_count = writes.span_count if writes else 0
            await self._send_event(task, "finished", status=status, worker_id=updated.worker_id,
                                   span_count=span_count, metadata=event_meta)  # fmt: skip
            aid = updated.attempt_id

            def applied(s: RolloutSnapshot) -> bool:
                return s.attempt is not None and (s.attempt.attempt_id != aid or s.attempt.status in FINISHED_BY_RUNNER)

            await self._await_view(rollout_id, applied, f"attempt {aid} {status}")
            return self.view.attempt(rollout_id, aid) or updated
        if "status" in updates or "worker_id" in updates:
            await self._send_event(task, "started", worker_id=updated.worker_id, metadata=event_meta)
        elif "last_heartbeat_time" in updates or "metadata" in updates:
            await self._send_event(task, "heartbeat", worker_id=updated.worker_id, metadata=event_meta,
                                   timestamp=updated.last_heartbeat_time or time.time())  # fmt: skip
        self.view.provisional(snap.rollout, updated)
        return updated

    def _resolve_attempt(self, snap: RolloutSnapshot, attempt_id: str) -> Attempt:
        rid = snap.rollout.rollout_id
        if attempt_id == "latest":
            if snap.attempt is None:
                raise ValueError(f"rollout {rid} has no attempt yet")
            return snap.attempt
        found = self.view.attempt(rid, attempt_id)
        if found is None:
            raise ValueError(f"attempt {attempt_id} not found for rollout {rid}")
        return found

    @staticmethod
    def _task_of(snap: RolloutSnapshot, attempt: Attempt) -> AttemptedRollout:
        return AttemptedRollout(**snap.rollout.model_dump(), attempt=attempt)

    async def _send_event(self, task: AttemptedRollout, kind: str, **fields: Any) -> None:
        fields["metadata"] = {**task.metadata, **(fields.get("metadata") or {})}
        event = AttemptEvent(kind=kind, rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id,  # type: ignore[arg-type]
                             attempt_sequence_id=task.attempt.sequence_id, mode=task.mode,
                             resources_id=task.resources_id, **fields)  # fmt: skip
        await self._producer.send_and_wait(self.settings.topic("attempts"), event, key=task.rollout_id)

    # ================================================================= rollouts and attempts: read

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        """The rollout with its latest attempt attached once it has one (``AttemptedRollout``), or None."""
        return self.view.rollout(rollout_id)

    async def query_rollouts(
        self,
        *,
        status_in: Optional[Sequence[RolloutStatus]] = None,
        rollout_id_in: Optional[Sequence[str]] = None,
        rollout_id_contains: Optional[str] = None,
        filter_logic: Literal["and", "or"] = "and",
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
        status: Optional[Sequence[RolloutStatus]] = None,
        rollout_ids: Optional[Sequence[str]] = None,
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """Rollouts filtered, sorted and paginated as upstream (``status``/``rollout_ids`` are the deprecated aliases)."""
        statuses = status_in if status_in is not None else status
        ids = rollout_id_in if rollout_id_in is not None else rollout_ids
        rollout_filter: dict[str, Any] = {}
        if ids is not None:
            rollout_filter["within"] = list(ids)
        if rollout_id_contains is not None:
            rollout_filter["contains"] = rollout_id_contains
        filters: dict[str, dict[str, Any]] = {}
        if statuses is not None:
            filters["status"] = {"within": list(statuses)}
        if rollout_filter:
            filters["rollout_id"] = rollout_filter
        return query(self.view.rollouts(), Rollout, filters=filters, filter_logic=filter_logic, sort_by=sort_by,
                     sort_order=sort_order, limit=limit, offset=offset)  # fmt: skip

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: Optional[str] = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        """Every attempt of the rollout the state machine reported (each with its last known status)."""
        return query(self.view.attempts(rollout_id), Attempt, sort_by=sort_by, sort_order=sort_order, limit=limit,
                     offset=offset)  # fmt: skip

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        return self.view.latest_attempt(rollout_id)

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        """The rollouts among ``rollout_ids`` that reached a terminal status, waiting up to ``timeout`` seconds
        (None: until all are done) for the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [
                snap.rollout
                for rid in rollout_ids
                if (snap := self.view.matches(rid, lambda s: s.rollout.status in TERMINAL_ROLLOUT_STATUSES)) is not None
            ]
            if len(done) == len(rollout_ids):
                return done
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return done
            await self._rollouts.wait_changed(1.0 if remaining is None else min(remaining, 1.0))

    async def wait_until_known(self, rollout_id: str, attempt_id: Optional[str] = None,
                               timeout: Optional[float] = None) -> bool:  # fmt: skip
        """Wait until this client's view has the rollout (and the attempt, when given); False after ``timeout``.

        For writers that serve other processes (the store front door): a rollout enqueued or dequeued
        through another client reaches this view only once the state machine reported it."""
        deadline = time.monotonic() + (self.consistency_timeout if timeout is None else timeout)

        def known() -> bool:
            if self.view.snapshot(rollout_id) is None:
                return False
            return attempt_id is None or attempt_id == "latest" or self.view.attempt(rollout_id, attempt_id) is not None

        while not known():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self._rollouts.wait_changed(min(remaining, 0.5))
        return True

    def _require_rollout(self, rollout_id: str) -> RolloutSnapshot:
        snap = self.view.snapshot(rollout_id)
        if snap is None:
            raise ValueError(f"rollout {rollout_id} not found")
        return snap

    async def _await_view(self, rollout_id: str, predicate: Callable[[RolloutSnapshot], bool], what: str) -> RolloutSnapshot:
        """Wait until the state machine's snapshot of the rollout satisfies ``predicate`` (read-your-writes)."""
        deadline = time.monotonic() + self.consistency_timeout
        while (snap := self.view.matches(rollout_id, predicate)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConsistencyTimeout(
                    f"the state machine did not apply '{what}' to rollout {rollout_id} within {self.consistency_timeout:.0f}s "
                    "(is `agl-stream processors state-machine` running?)"
                )
            await self._rollouts.wait_changed(min(remaining, 0.5))
        return snap

    # ================================================================= spans

    def _attempt_writes(self, rollout_id: str, attempt_id: str) -> _AttemptWrites:
        snap = self._require_rollout(rollout_id)
        key = (rollout_id, attempt_id)
        if key not in self._writes:
            known = {a.attempt_id for a in self.view.attempts(rollout_id)}
            if snap.attempt is not None:
                known.add(snap.attempt.attempt_id)
            if attempt_id not in known:
                raise ValueError(f"attempt {attempt_id} not found for rollout {rollout_id}")
            self._writes[key] = _AttemptWrites()
        return self._writes[key]

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
            latest = self.view.latest_attempt(rollout_id)
            if latest is None:
                return PaginatedResult([], limit, offset, 0)
            resolved = latest.attempt_id
        exact = {k: v for k, v in (("trace_id", trace_id), ("span_id", span_id), ("parent_id", parent_id), ("name", name))
                 if v is not None}  # fmt: skip
        contains = {k: v for k, v in (("trace_id", trace_id_contains), ("span_id", span_id_contains),
                                      ("parent_id", parent_id_contains), ("name", name_contains)) if v is not None}  # fmt: skip
        spec = SpanQuery(rollout_id, resolved, exact, contains, filter_logic, sort_by, sort_order, limit, offset)
        reader = self._reader()
        await self._await_spans(reader, rollout_id, resolved)
        return await reader.read_spans(spec)

    async def _await_spans(self, reader: SpanReader, rollout_id: str, attempt_id: Optional[str]) -> None:
        attempts = self.view.attempts(rollout_id)
        if attempt_id is not None:
            attempts = [a for a in attempts if a.attempt_id == attempt_id]
        deadline = time.monotonic() + self.consistency_timeout
        for attempt in attempts:
            finished = attempt.status in FINISHED_BY_RUNNER
            own = self._writes.get((rollout_id, attempt.attempt_id))
            delay = 0.05
            while True:
                progress = await reader.attempt_progress(rollout_id, attempt.attempt_id) if finished else None
                missing = await reader.missing_span_ids(rollout_id, attempt.attempt_id, sorted(own.span_ids)) if own else set()
                if (progress is None or progress.complete) and not missing:
                    break
                if time.monotonic() > deadline:
                    detail = f"{progress.stored} of {progress.expected} spans" if progress is not None else ""
                    raise ConsistencyTimeout(
                        f"spans of attempt {attempt.attempt_id} (rollout {rollout_id}) not all stored within "
                        f"{self.consistency_timeout:.0f}s ({detail}{', ' if detail and missing else ''}"
                        f"{len(missing)} added here missing{'' if missing else ' none'}); are the sinks running? "
                        "rejected spans are in the dead_letters table"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    # ================================================================= resources

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new set of resources under a new id; it becomes the latest."""
        return await self._publish(generate_resources_id(), resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new version of existing resources; it becomes the latest."""
        return await self._publish(resources_id, resources)

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return self.resources.latest()

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        return self.resources.get(resources_id)

    async def query_resources(
        self,
        *,
        resources_id: Optional[str] = None,
        resources_id_contains: Optional[str] = None,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        """Every resources id with its latest version, in publication order (unless ``sort_by``)."""
        field = {k: v for k, v in (("exact", resources_id), ("contains", resources_id_contains)) if v is not None}
        return query(self.resources.all(), ResourcesUpdate, filters={"resources_id": field} if field else None,
                     sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)  # fmt: skip

    async def _publish(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        now = time.time()
        previous = self.resources.get(resources_id)
        update = ResourcesUpdate.model_validate(
            {
                "resources_id": resources_id,
                "resources": resources,
                "create_time": previous.create_time if previous else now,
                "update_time": now,
                "version": self.resources.max_version + 1,
            }
        )
        topic = self.settings.topic("resources")
        await asyncio.gather(
            await self._producer.send(topic, update, key=resources_id),
            await self._producer.send(topic, update, key=LATEST_KEY),
        )
        self.resources.apply(resources_id, update)
        return update

    # ================================================================= workers

    async def _worker_view(self) -> dict[str, Worker]:
        if self._workers_follower is None:
            self._workers_follower = TopicFollower(self.settings, "workers", Worker, self._apply_worker, bootstrap=self.bootstrap)
            await self._workers_follower.start()
        return self._workers

    def _apply_worker(self, key: Optional[str], worker: Worker) -> None:
        known = self._workers.get(worker.worker_id)
        if known is None or (worker.last_heartbeat_time or 0.0) >= (known.last_heartbeat_time or 0.0):
            self._workers[worker.worker_id] = worker

    async def query_workers(
        self,
        *,
        status_in: Optional[Sequence[WorkerStatus]] = None,
        worker_id_contains: Optional[str] = None,
        filter_logic: Literal["and", "or"] = "and",
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        """Workers from their heartbeats on the compacted ``agl.workers`` (runner processes and ``update_worker``)."""
        workers = await self._worker_view()
        filters: dict[str, dict[str, Any]] = {}
        if status_in is not None:
            filters["status"] = {"within": list(status_in)}
        if worker_id_contains is not None:
            filters["worker_id"] = {"contains": worker_id_contains}
        return query(list(workers.values()), Worker, filters=filters, filter_logic=filter_logic, sort_by=sort_by,
                     sort_order=sort_order, limit=limit, offset=offset)  # fmt: skip

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        return (await self._worker_view()).get(worker_id)

    async def update_worker(self, worker_id: str, heartbeat_stats: Union[dict[str, Any], Unset] = UNSET) -> Worker:
        """A heartbeat of ``worker_id`` on ``agl.workers`` (stats replaced when given)."""
        known = (await self._worker_view()).get(worker_id)
        worker = known.model_copy() if known is not None else Worker(worker_id=worker_id)
        worker.last_heartbeat_time = time.time()
        if not isinstance(heartbeat_stats, Unset):
            worker.heartbeat_stats = dict(heartbeat_stats)
        await self._producer.send_and_wait(self.settings.topic("workers"), worker, key=worker_id)
        self._apply_worker(worker_id, worker)
        return worker
