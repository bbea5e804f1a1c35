"""agl :class:`~agl_stream.types.Span` -> OTel ``ReadableSpan``, for the OTLP/HTTP export mode."""

from __future__ import annotations

from typing import Any, Optional

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as OtelEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Link as OtelLink
from opentelemetry.trace import SpanContext as OtelSpanContext
from opentelemetry.trace import SpanKind, Status, StatusCode, TraceFlags

from agl_stream.semconv import LightningResourceAttributes
from agl_stream.tracer.attributes import to_attribute_value
from agl_stream.types import Span, SpanContext


def _ns(seconds: Optional[float]) -> Optional[int]:
    return int(seconds * 1e9) if seconds is not None else None


def _ctx(ctx: Optional[SpanContext]) -> Optional[OtelSpanContext]:
    if ctx is None:
        return None
    return OtelSpanContext(
        trace_id=int(ctx.trace_id, 16),
        span_id=int(ctx.span_id, 16),
        is_remote=ctx.is_remote,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _attrs(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: to_attribute_value(v) for k, v in attributes.items() if v is not None}


def span_to_readable(span: Span) -> ReadableSpan:
    context = _ctx(span.context or SpanContext(trace_id=span.trace_id, span_id=span.span_id))
    parent = _ctx(span.parent) if span.parent else (
        _ctx(SpanContext(trace_id=span.trace_id, span_id=span.parent_id)) if span.parent_id else None
    )
    attributes = _attrs(span.attributes)
    attributes[LightningResourceAttributes.SPAN_SEQUENCE_ID.value] = span.sequence_id
    resource = _attrs(span.resource.attributes)
    resource[LightningResourceAttributes.ROLLOUT_ID.value] = span.rollout_id
    resource[LightningResourceAttributes.ATTEMPT_ID.value] = span.attempt_id
    resource.pop(LightningResourceAttributes.SPAN_SEQUENCE_ID.value, None)  # per span, not per resource
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=Resource(resource, span.resource.schema_url or None),
        attributes=attributes,
        events=[OtelEvent(e.name, _attrs(e.attributes), _ns(e.timestamp)) for e in span.events],
        links=[OtelLink(_ctx(link.context), _attrs(link.attributes)) for link in span.links],  # type: ignore[arg-type]
        kind=SpanKind[span.kind] if span.kind in SpanKind.__members__ else SpanKind.INTERNAL,
        status=Status(
            StatusCode[span.status.status_code],
            span.status.description if span.status.status_code == "ERROR" else None,
        ),
        start_time=_ns(span.start_time),
        end_time=_ns(span.end_time),
    )
