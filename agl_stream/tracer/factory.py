"""Build the tracer a runner uses from its settings (the ``AGL_SPAN_*`` and ``AGL_OTLP_ENDPOINT`` fields).

``span_export`` chooses the export mode: ``kafka`` (default; produce to ``agl.spans``) or ``otlp``
(standard OTLP/HTTP to ``otlp_endpoint``, e.g. the ingest receiver's ``http://host:4318/v1/traces``,
for agents that cannot reach Kafka). ``span_buffer`` bounds the hand-off buffer (spans) and
``span_overflow`` picks its overflow policy (``block`` or ``drop``, see :mod:`agl_stream.tracer.exporter`).
Arguments given to the functions below win over the settings.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from agl_stream.config import Settings, SettingsError
from agl_stream.tracer.exporter import SpanExportPipeline
from agl_stream.tracer.otel import OtelTracer
from agl_stream.tracer.sinks import KafkaSpanSink, OtlpSpanSink, SpanSink

ExportMode = Literal["kafka", "otlp"]


def create_tracer(
    settings: Settings,
    *,
    mode: Optional[str] = None,
    otlp_endpoint: Optional[str] = None,
    max_buffered: Optional[int] = None,
    overflow: Optional[str] = None,
) -> OtelTracer:
    """An (uninitialized) :class:`OtelTracer` exporting to the configured sink."""
    return OtelTracer(create_pipeline(settings, mode=mode, otlp_endpoint=otlp_endpoint, max_buffered=max_buffered,
                                      overflow=overflow))  # fmt: skip


def create_pipeline(
    settings: Settings,
    *,
    mode: Optional[str] = None,
    otlp_endpoint: Optional[str] = None,
    max_buffered: Optional[int] = None,
    overflow: Optional[str] = None,
) -> SpanExportPipeline:
    """The (unstarted) export pipeline the settings (and these arguments) configure."""
    given: dict[str, Any] = {"span_export": mode, "otlp_endpoint": otlp_endpoint, "span_buffer": max_buffered,
                             "span_overflow": overflow}  # fmt: skip
    if any(v is not None for v in given.values()):
        settings = settings.with_values(**given)
    if settings.span_export == "otlp":
        endpoint = settings.otlp_endpoint
        if not endpoint:
            raise SettingsError("AGL_SPAN_EXPORT=otlp needs AGL_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318/v1/traces)")

        def sink() -> SpanSink:
            return OtlpSpanSink(endpoint)

    else:

        def sink() -> SpanSink:
            return KafkaSpanSink(settings)

    return SpanExportPipeline(sink, max_buffered=settings.span_buffer, overflow=settings.span_overflow)
