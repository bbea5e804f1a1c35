"""Build the tracer a runner uses from settings and ``AGL_SPAN_*`` environment variables.

``AGL_SPAN_EXPORT`` chooses the export mode: ``kafka`` (default; produce to ``agl.spans``) or
``otlp`` (standard OTLP/HTTP to ``AGL_OTLP_ENDPOINT``, e.g. the ingest receiver's
``http://host:4318/v1/traces``, for agents that cannot reach Kafka). ``AGL_SPAN_BUFFER`` bounds
the hand-off buffer (spans) and ``AGL_SPAN_OVERFLOW`` picks its overflow policy (``block`` or
``drop``, see :mod:`agl_stream.tracer.exporter`).
"""

from __future__ import annotations

from typing import Literal, Mapping, Optional

from agl_stream.config import Settings, SettingsError
from agl_stream.env_var import resolve_int_env_var, resolve_str_env_var
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
    env: Optional[Mapping[str, str]] = None,
) -> OtelTracer:
    """An (uninitialized) :class:`OtelTracer` exporting to the configured sink."""
    return OtelTracer(create_pipeline(settings, mode=mode, otlp_endpoint=otlp_endpoint, max_buffered=max_buffered,
                                      overflow=overflow, env=env))  # fmt: skip


def create_pipeline(
    settings: Settings,
    *,
    mode: Optional[str] = None,
    otlp_endpoint: Optional[str] = None,
    max_buffered: Optional[int] = None,
    overflow: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> SpanExportPipeline:
    """The (unstarted) export pipeline the ``AGL_SPAN_*`` variables configure."""
    chosen = resolve_str_env_var("AGL_SPAN_EXPORT", mode, "kafka", env)
    if chosen not in ("kafka", "otlp"):
        raise SettingsError(f"AGL_SPAN_EXPORT={chosen!r}: use 'kafka' or 'otlp'")
    policy = resolve_str_env_var("AGL_SPAN_OVERFLOW", overflow, "block", env)
    if policy not in ("block", "drop"):
        raise SettingsError(f"AGL_SPAN_OVERFLOW={policy!r}: use 'block' or 'drop'")
    try:
        buffered = resolve_int_env_var("AGL_SPAN_BUFFER", max_buffered, 50_000, env)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if buffered is None or buffered < 1:
        raise SettingsError(f"AGL_SPAN_BUFFER={buffered!r}: must be a positive number of spans")

    if chosen == "otlp":
        endpoint = resolve_str_env_var("AGL_OTLP_ENDPOINT", otlp_endpoint, None, env)
        if not endpoint:
            raise SettingsError("AGL_SPAN_EXPORT=otlp needs AGL_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318/v1/traces)")

        def sink() -> SpanSink:
            return OtlpSpanSink(endpoint)

    else:

        def sink() -> SpanSink:
            return KafkaSpanSink(settings)

    return SpanExportPipeline(sink, max_buffered=buffered, overflow=policy)  # type: ignore[arg-type]
