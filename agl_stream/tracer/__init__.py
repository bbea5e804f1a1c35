"""Tracing agents into agl spans: the OpenTelemetry-based tracer and its export pipeline."""

from agl_stream.tracer.base import (
    ActiveAttempt,
    Tracer,
    clear_active_tracer,
    get_active_attempt,
    get_active_tracer,
    set_active_tracer,
)
from agl_stream.tracer.compat import AgentOpsTracer, DummyTracer
from agl_stream.tracer.exporter import AttemptCounters, SpanExportPipeline
from agl_stream.tracer.factory import create_tracer
from agl_stream.tracer.otel import OtelTracer, install_global_processor, spans_outside_attempt
from agl_stream.tracer.sinks import KafkaSpanSink, OtlpSpanSink, SpanSink

__all__ = [
    "ActiveAttempt",
    "AgentOpsTracer",
    "AttemptCounters",
    "DummyTracer",
    "KafkaSpanSink",
    "OtelTracer",
    "OtlpSpanSink",
    "SpanExportPipeline",
    "SpanSink",
    "Tracer",
    "clear_active_tracer",
    "create_tracer",
    "get_active_attempt",
    "get_active_tracer",
    "install_global_processor",
    "set_active_tracer",
    "spans_outside_attempt",
]
