"""The span export pipeline: a bounded hand-off buffer and a background thread that ships batches.

The agent's thread only appends to a buffer (a few microseconds per span). A dedicated thread runs
its own asyncio loop that converts OTel spans into agl records, sizes them and hands them to the
sink (Kafka or OTLP), so neither the agent's thread nor its event loop ever waits on the network.
The exporter sleeps while the buffer is empty; the span that finds it empty arms a ``linger``
timer (one cross-thread call per batch, not per span: waking it per span would cost the agent a
system call each time), and ``batch_size`` waiting spans wake it at once. An idle runner therefore
costs nothing here.

Overflow policy (``overflow``):

* ``"block"`` (default): when ``max_buffered`` spans are waiting, the emitting thread waits for
  room up to ``block_timeout`` seconds (backpressure while the broker is slow or briefly gone);
  if there is still no room the span is dropped and counted.
* ``"drop"``: the new span is dropped at once and counted.

Dropped spans are counted globally (``spans_dropped``) and per attempt, and logged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Union

from opentelemetry.sdk.trace import ReadableSpan

from agl_stream.tracer.convert import SpanDoc, core_to_doc, readable_to_doc
from agl_stream.tracer.sinks import SpanSink
from agl_stream.types import Span, SpanCoreFields

logger = logging.getLogger(__name__)

OverflowPolicy = Literal["block", "drop"]


@dataclass
class AttemptCounters:
    """Per-attempt bookkeeping shared by the tracer (agent side) and the exporter thread."""

    rollout_id: str
    attempt_id: str
    tracer_name: str = "agl-stream"
    extra_resource: dict[str, Any] = field(default_factory=dict)
    submitted: int = 0
    dropped: int = 0
    reward_spans: int = 0
    last_reward: Optional[float] = None
    #: every named dimension of the last reward (e.g. ``correct`` beside a shaped primary reward)
    last_reward_dimensions: dict[str, float] = field(default_factory=dict)
    #: what the agent produced in this attempt (OTel spans as they ended, returned agl spans), for hooks
    spans: list[Union[ReadableSpan, Span, SpanCoreFields]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _next_sequence: int = 1

    def next_sequence_id(self) -> int:
        with self._lock:
            value = self._next_sequence
            self._next_sequence += 1
            return value


@dataclass(frozen=True)
class CoreSpan:
    """A complete span an emitter produced, with ids but no OTel object behind it (the cheap path)."""

    core: SpanCoreFields
    trace_id: str
    span_id: str
    parent_id: Optional[str]


@dataclass
class PendingSpan:
    span: Union[ReadableSpan, Span, CoreSpan]
    attempt: AttemptCounters
    sequence_id: int


@dataclass
class _FlushMarker:
    future: "concurrent.futures.Future[None]"


class SpanExportPipeline:
    """Bounded buffer + exporter thread in front of a :class:`SpanSink`."""

    def __init__(
        self,
        sink_factory: Callable[[], SpanSink],
        *,
        max_buffered: int = 50_000,
        overflow: OverflowPolicy = "block",
        block_timeout: float = 30.0,
        batch_size: int = 512,
        linger: float = 0.05,
    ) -> None:
        if overflow not in ("block", "drop"):
            raise ValueError(f"overflow must be 'block' or 'drop', not {overflow!r}")
        self._sink_factory = sink_factory
        self.sink: Optional[SpanSink] = None
        self.max_buffered = max_buffered
        self.overflow = overflow
        self.block_timeout = block_timeout
        self.batch_size = batch_size
        self.linger = linger
        self._queue: deque[Union[PendingSpan, _FlushMarker]] = deque()
        self._spans_queued = 0
        self._cond = threading.Condition()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._wakeup: Optional[asyncio.Event] = None
        self._wake_pending = False  # a linger timer or a wake-up is on its way
        self._full_wake_pending = False  # a full batch already asked for a wake-up
        self._linger_timer: Optional[asyncio.TimerHandle] = None
        self._confirmations: set[asyncio.Task[None]] = set()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._started = threading.Event()
        self._start_error: Optional[BaseException] = None
        self.spans_submitted = 0
        self.spans_dropped = 0
        self.spans_exported = 0
        self.spans_failed_conversion = 0
        self.spans_failed_write = 0

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 60.0) -> "SpanExportPipeline":
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run_thread, name="agl-span-exporter", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"span exporter did not start within {timeout}s")
        if self._start_error is not None:
            self._thread = None
            raise self._start_error
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Export everything buffered, then stop the thread."""
        if self._thread is None:
            return
        try:
            self.flush(timeout=timeout)
        except Exception as exc:
            logger.error("final span flush failed: %r", exc)
        self._stopping = True
        self._wake()
        self._thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def _alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    # ---------------------------------------------------------------- agent side

    def submit(self, item: PendingSpan) -> bool:
        """Queue one span; returns False if it was dropped by the overflow policy."""
        with self._cond:
            if self._spans_queued >= self.max_buffered:
                if self.overflow == "block" and self._alive:
                    deadline = time.monotonic() + self.block_timeout
                    while self._spans_queued >= self.max_buffered and self._alive:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or not self._cond.wait(remaining):
                            break
                if self._spans_queued >= self.max_buffered:
                    self.spans_dropped += 1
                    item.attempt.dropped += 1
                    if self.spans_dropped == 1 or self.spans_dropped % 1000 == 0:
                        logger.error(
                            "span buffer full (%d spans, policy %s): dropped %d span(s) so far",
                            self.max_buffered, self.overflow, self.spans_dropped,
                        )  # fmt: skip
                    return False
            self._queue.append(item)
            self._spans_queued += 1
            self.spans_submitted += 1
            item.attempt.submitted += 1
            full = self._spans_queued >= self.batch_size and not self._full_wake_pending
            first = len(self._queue) == 1 and not self._wake_pending
            if full:
                self._full_wake_pending = True
            if first:
                self._wake_pending = True
        if full:
            self._wake()
        elif first:
            self._wake_after_linger()
        return True

    def flush_async(self) -> "concurrent.futures.Future[None]":
        """A future that resolves when every span queued before this call is delivered (or failed)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self._alive:
            future.set_exception(RuntimeError("span exporter is not running"))
            return future
        with self._cond:
            self._queue.append(_FlushMarker(future))
            self._wake_pending = True
        self._wake()  # at once: whoever flushes is waiting
        return future

    def flush(self, timeout: Optional[float] = None) -> None:
        self.flush_async().result(timeout)

    @property
    def buffered(self) -> int:
        return self._spans_queued

    # ---------------------------------------------------------------- exporter thread

    def _wake(self) -> None:
        self._call_in_loop(self._set_wakeup)

    def _wake_after_linger(self) -> None:
        self._call_in_loop(self._arm_linger)

    def _call_in_loop(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:  # loop closed between the check and the call
                pass

    def _set_wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _arm_linger(self) -> None:
        """In the exporter loop: wake up ``linger`` seconds from now (the first span of a batch arrived)."""
        if self._linger_timer is None and self._loop is not None:
            self._linger_timer = self._loop.call_later(self.linger, self._linger_expired)

    def _linger_expired(self) -> None:
        self._linger_timer = None
        self._set_wakeup()

    def _run_thread(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to start() or logged; the thread must not die silently
            if not self._started.is_set():
                self._start_error = exc
                self._started.set()
            else:
                logger.exception("span exporter thread crashed")
        finally:
            loop.close()
            with self._cond:
                self._cond.notify_all()
            self._fail_pending_markers()

    async def _main(self) -> None:
        self._wakeup = asyncio.Event()
        self.sink = self._sink_factory()
        await self.sink.start()
        self._started.set()
        try:
            while True:
                await self._wakeup.wait()  # a linger timer, a full batch, a flush or stop
                self._wakeup.clear()
                await self._drain()
                if self._stopping:
                    await self._drain()
                    if self._confirmations:
                        await asyncio.gather(*self._confirmations, return_exceptions=True)
                    break
        finally:
            await self.sink.stop()

    async def _drain(self) -> None:
        assert self.sink is not None
        while True:
            with self._cond:
                self._wake_pending = self._full_wake_pending = False
                if not self._queue:
                    return
                items = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            spans: list[SpanDoc] = []
            for item in items:
                if isinstance(item, _FlushMarker):
                    await self._write(spans)
                    spans = []
                    # Confirm in the background: the sink's flush covers what was written so far, and
                    # the drain loop must not stall while one attempt waits for its acknowledgements.
                    task = asyncio.create_task(self._confirm(item))
                    self._confirmations.add(task)
                    task.add_done_callback(self._confirmations.discard)
                    continue
                span = self._convert(item)
                if span is not None:
                    spans.append(span)
            await self._write(spans)

    async def _confirm(self, marker: _FlushMarker) -> None:
        assert self.sink is not None
        try:
            await self.sink.flush()
        except Exception as exc:
            marker.future.set_exception(exc)
        else:
            marker.future.set_result(None)

    async def _write(self, spans: list[SpanDoc]) -> None:
        assert self.sink is not None
        if spans:
            try:
                await self.sink.write(spans)
                self.spans_exported += len(spans)
            except Exception as exc:  # the sink is broken for this batch; count it, keep the exporter alive
                self.spans_failed_write += len(spans)
                logger.error("writing %d span(s) to the %s sink failed: %r", len(spans), self.sink.name, exc)
        with self._cond:
            self._spans_queued -= len(spans)
            self._cond.notify_all()

    def _convert(self, item: PendingSpan) -> Optional[SpanDoc]:
        attempt = item.attempt
        span = item.span
        try:
            if isinstance(span, CoreSpan):
                return core_to_doc(
                    span.core,
                    trace_id=span.trace_id,
                    span_id=span.span_id,
                    parent_id=span.parent_id,
                    rollout_id=attempt.rollout_id,
                    attempt_id=attempt.attempt_id,
                    sequence_id=item.sequence_id,
                    tracer_name=attempt.tracer_name,
                    extra_resource=attempt.extra_resource,
                )
            if isinstance(span, Span):
                return span.model_dump(mode="json")
            return readable_to_doc(
                span,
                rollout_id=attempt.rollout_id,
                attempt_id=attempt.attempt_id,
                sequence_id=item.sequence_id,
                tracer_name=attempt.tracer_name,
                extra_resource=attempt.extra_resource,
            )
        except Exception as exc:
            self.spans_failed_conversion += 1
            with self._cond:
                self._spans_queued -= 1
            logger.error("span %r of attempt %s could not be converted: %r", getattr(item.span, "name", "?"), attempt.attempt_id, exc)
            return None

    def _fail_pending_markers(self) -> None:
        with self._cond:
            items, self._queue = list(self._queue), deque()
        for item in items:
            if isinstance(item, _FlushMarker) and not item.future.done():
                item.future.set_exception(RuntimeError("span exporter stopped"))
