"""``OtelTracer``: an OpenTelemetry ``TracerProvider`` whose spans become agl Span records.

One span processor is installed on the process's global tracer provider, so every library that
emits OpenTelemetry spans (GenAI instrumentation for OpenAI, LangChain, ...) is captured with no
code change. The processor attributes each span to the attempt active when it started (or to its
parent's attempt, for spans started in threads that did not copy the context), allocates the
per-attempt monotonic ``sequence_id`` when it ends, and hands it to the export pipeline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from typing import TYPE_CHECKING, Any, Optional, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider

from agl_stream._porting import module_getattr
from agl_stream.adapter.rewards import reward_dimensions
from agl_stream.semconv import AGL_REWARD, REWARD_INTERMEDIATE
from agl_stream.tracer.base import Tracer, _ACTIVE, get_active_attempt
from agl_stream.tracer.exporter import AttemptCounters, CoreSpan, PendingSpan, SpanExportPipeline
from agl_stream.tracer.convert import lightning_resource_attributes
from agl_stream.types import OtelResource, Span, SpanCoreFields

logger = logging.getLogger(__name__)

PRIMARY_REWARD_KEY = "agentlightning.reward.0.value"
INSTRUMENTATION_NAME = "agentlightning"


class _AttemptSpanProcessor(SpanProcessor):
    """Routes finished OTel spans to the tracer of the attempt they belong to (one per process)."""

    def __init__(self) -> None:
        self._owners: dict[int, tuple["OtelTracer", AttemptCounters]] = {}
        self.spans_outside_attempt = 0

    def on_start(self, span: Any, parent_context: Optional[otel_context.Context] = None) -> None:
        active = _ACTIVE.get()
        if active is not None and isinstance(active.tracer, OtelTracer):
            self._owners[span.context.span_id] = (active.tracer, active.state)
            return
        parent = span.parent
        if parent is not None:
            owner = self._owners.get(parent.span_id)
            if owner is not None:
                self._owners[span.context.span_id] = owner

    def on_end(self, span: ReadableSpan) -> None:
        owner = self._owners.pop(span.context.span_id, None) if span.context is not None else None
        if owner is None:
            self.spans_outside_attempt += 1
            return
        tracer, state = owner
        tracer._record(span, state)

    def shutdown(self) -> None:
        self._owners.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_PROCESSOR = _AttemptSpanProcessor()
_INSTALL_LOCK = threading.Lock()
_installed_on: Optional[TracerProvider] = None


def install_global_processor() -> TracerProvider:
    """Put the attempt processor on the global SDK provider (creating and registering one if needed)."""
    global _installed_on
    with _INSTALL_LOCK:
        current = otel_trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            provider = current
        else:
            provider = TracerProvider(
                resource=Resource.create({"service.name": "agl-stream-agent"}),
                span_limits=SpanLimits(max_span_attributes=4096, max_events=1024, max_event_attributes=1024),
            )
            otel_trace.set_tracer_provider(provider)
            installed = otel_trace.get_tracer_provider()
            if installed is not provider:  # somebody else won the race to set it
                if not isinstance(installed, TracerProvider):
                    raise RuntimeError(f"the global tracer provider is {type(installed).__name__}, not an SDK TracerProvider")
                provider = installed
        if _installed_on is not provider:
            provider.add_span_processor(_PROCESSOR)
            _installed_on = provider
        return provider


def _random_id(bits: int) -> int:
    value = 0
    while value == 0:  # all-zero ids are invalid in OpenTelemetry
        value = random.getrandbits(bits)
    return value


def _note_reward(name: str, attributes: Any, state: AttemptCounters) -> None:
    """Keep the attempt's reward bookkeeping (double-reward warning, final reward in the finished event);
    intermediate rewards (AIR's) are neither a final reward nor a reason to warn."""
    if attributes and (name == AGL_REWARD or PRIMARY_REWARD_KEY in attributes):
        if attributes.get(REWARD_INTERMEDIATE) is True:
            return
        state.reward_spans += 1
        value = attributes.get(PRIMARY_REWARD_KEY)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            state.last_reward = float(value)
            state.last_reward_dimensions = dict(reward_dimensions(attributes))


def spans_outside_attempt() -> int:
    """OTel spans that ended while no attempt was active (not exported; they belong to no rollout)."""
    return _PROCESSOR.spans_outside_attempt


class OtelTracer(Tracer):
    """Traces attempts with plain OpenTelemetry and exports through a :class:`SpanExportPipeline`."""

    name = "otel"

    def __init__(self, pipeline: Optional[SpanExportPipeline] = None, *, capture_spans: bool = True) -> None:
        """Without a ``pipeline`` (upstream's ``OtelTracer()``), the runner attaches the one the
        settings configure (``AGL_SPAN_EXPORT``...) before :meth:`init`."""
        super().__init__()
        self._pipeline = pipeline
        self.capture_spans = capture_spans
        self._otel_tracer: Optional[otel_trace.Tracer] = None

    @property
    def pipeline(self) -> SpanExportPipeline:
        if self._pipeline is None:
            raise RuntimeError("this tracer has no export pipeline yet; the runner attaches one (attach_pipeline)")
        return self._pipeline

    @property
    def has_pipeline(self) -> bool:
        return self._pipeline is not None

    def attach_pipeline(self, pipeline: SpanExportPipeline) -> None:
        if self._pipeline is not None and self._pipeline is not pipeline:
            raise RuntimeError("this tracer already exports through another pipeline")
        self._pipeline = pipeline

    def __getstate__(self) -> dict[str, Any]:
        """Sent to runner processes before :meth:`init`: configuration only, no threads or OTel handles."""
        if self._otel_tracer is not None:
            raise TypeError("an initialized tracer cannot be sent to another process; pass it before init()")
        state = dict(self.__dict__)
        state["_pipeline"] = None
        state["_last"] = None
        return state

    # ---------------------------------------------------------------- lifecycle

    def init(self, *args: Any, **kwargs: Any) -> None:
        provider = install_global_processor()
        self._otel_tracer = provider.get_tracer(INSTRUMENTATION_NAME)
        _instrument_llm_clients(provider)
        self.pipeline.start()

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self.pipeline.stop()

    @property
    def otel_tracer(self) -> otel_trace.Tracer:
        if self._otel_tracer is None:
            raise RuntimeError("tracer is not initialized; call init() first")
        return self._otel_tracer

    # ---------------------------------------------------------------- recording

    def _record(self, span: Any, state: AttemptCounters) -> None:
        _note_reward(span.name, span.attributes, state)
        if self.capture_spans:
            state.spans.append(span)
        self.pipeline.submit(PendingSpan(span, state, state.next_sequence_id()))

    def create_span(self, core: SpanCoreFields) -> None:
        """Record an emitter's complete span as a child of the current OTel span.

        It bypasses the OTel SDK (no Span object, no other span processors): emitters are the
        hottest path of an agent, and the SDK's span lifecycle costs several times the rest.
        """
        active = get_active_attempt()
        if active is None:
            raise RuntimeError("No active tracer found. Cannot emit span outside an attempt.")
        state = active.state
        parent = otel_trace.get_current_span().get_span_context()
        if parent.is_valid:
            trace_id, parent_id = format(parent.trace_id, "032x"), format(parent.span_id, "016x")
        else:
            trace_id, parent_id = format(_random_id(128), "032x"), None
        _note_reward(core.name, core.attributes, state)
        if self.capture_spans:
            state.spans.append(core)
        pending = CoreSpan(core, trace_id, format(_random_id(64), "016x"), parent_id)
        self.pipeline.submit(PendingSpan(pending, state, state.next_sequence_id()))

    def add_spans(self, spans: Sequence[Any]) -> int:
        active = get_active_attempt()
        if active is None:
            raise RuntimeError("add_spans needs an active attempt (inside trace_context)")
        state = active.state
        count = 0
        for item in spans:
            if isinstance(item, ReadableSpan):
                self._record(item, state)
            elif isinstance(item, (Span, SpanCoreFields)):
                seq = state.next_sequence_id()
                if isinstance(item, SpanCoreFields):
                    record = Span.from_core_fields(item, rollout_id=state.rollout_id, attempt_id=state.attempt_id, sequence_id=seq)
                else:
                    record = item.model_copy(update={"rollout_id": state.rollout_id, "attempt_id": state.attempt_id, "sequence_id": seq})
                resource = {**record.resource.attributes, **state.extra_resource}
                resource.update(lightning_resource_attributes(state.rollout_id, state.attempt_id, seq, state.tracer_name))
                record.resource = OtelResource(attributes=resource, schema_url=record.resource.schema_url)
                _note_reward(record.name, record.attributes, state)
                if self.capture_spans:
                    state.spans.append(record)
                self.pipeline.submit(PendingSpan(record, state, seq))
            else:
                raise TypeError(f"cannot record {type(item).__name__} as a span (expected Span, SpanCoreFields or ReadableSpan)")
            count += 1
        return count

    async def flush_attempt(self, state: AttemptCounters, timeout: Optional[float] = None) -> None:
        await asyncio.wait_for(asyncio.wrap_future(self.pipeline.flush_async()), timeout)


def _instrument_llm_clients(provider: TracerProvider) -> None:
    """Trace the installed agent frameworks and LLM clients with their maintained instrumentations
    (token ids included), as upstream's default tracer does; see :mod:`agl_stream.instrumentation`."""
    from agl_stream.instrumentation import instrument_installed

    armed = instrument_installed(provider)
    logger.debug("instrumented (when imported): %s", ", ".join(armed) or "nothing")


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
