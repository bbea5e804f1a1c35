"""OpenTelemetry ``ReadableSpan`` (or emitter core fields) -> agl span record.

The rollout/attempt ids and the per-attempt ``sequence_id`` are not known to OpenTelemetry; the
tracer supplies them and they are also written into the resource attributes under upstream's
``agentlightning.*`` keys, so the record reads the same as one exported by upstream's tracers.

Conversion builds the record as a plain dict with exactly the fields (and field order) of
:class:`~agl_stream.types.Span` and serializes it directly: the export thread handles every span,
and skipping model construction there roughly halves its cost. ``readable_to_span`` validates the
same dict into the model (tests assert both paths agree).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import pydantic_core
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext as OtelSpanContext

from agl_stream.instrumentation.conventions import normalize
from agl_stream.semconv import LightningResourceAttributes
from agl_stream.serialization import SCHEMA_VERSION, schema_name
from agl_stream.types import Span, SpanCoreFields

NS = 1e9
_ROLLOUT = LightningResourceAttributes.ROLLOUT_ID.value
_ATTEMPT = LightningResourceAttributes.ATTEMPT_ID.value
_SEQUENCE = LightningResourceAttributes.SPAN_SEQUENCE_ID.value
_TRACER = LightningResourceAttributes.TRACER_NAME.value
_ENVELOPE_PREFIX = b'{"schema":"' + schema_name(Span).encode() + b'","v":' + str(SCHEMA_VERSION).encode() + b',"data":'

SpanDoc = dict[str, Any]


def _attrs(attributes: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    if not attributes:
        return {}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()}


def _context(ctx: Optional[OtelSpanContext]) -> Optional[dict[str, Any]]:
    if ctx is None:
        return None
    return {
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "is_remote": bool(ctx.is_remote),
        "trace_state": dict(ctx.trace_state) if ctx.trace_state else {},
    }


def _seconds(ns: Optional[int]) -> Optional[float]:
    return ns / NS if ns is not None else None


def lightning_resource_attributes(rollout_id: str, attempt_id: str, sequence_id: int, tracer_name: str) -> dict[str, Any]:
    return {_ROLLOUT: rollout_id, _ATTEMPT: attempt_id, _SEQUENCE: sequence_id, _TRACER: tracer_name}


def readable_to_doc(
    span: ReadableSpan,
    *,
    rollout_id: str,
    attempt_id: str,
    sequence_id: int,
    tracer_name: str = "agl-stream",
    extra_resource: Optional[Mapping[str, Any]] = None,
) -> SpanDoc:
    """One finished OTel span as a Span-shaped dict."""
    context = _context(span.context)
    if context is None:
        raise ValueError(f"span {span.name!r} has no span context")
    parent = _context(span.parent)
    resource = _attrs(span.resource.attributes) if span.resource is not None else {}
    if extra_resource:
        resource.update(extra_resource)
    resource[_ROLLOUT], resource[_ATTEMPT], resource[_SEQUENCE], resource[_TRACER] = rollout_id, attempt_id, sequence_id, tracer_name
    status = span.status
    status_code = status.status_code.name if status is not None else "UNSET"
    name, attributes = normalize(span.name, _attrs(span.attributes))
    return {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": sequence_id,
        "trace_id": context["trace_id"],
        "span_id": context["span_id"],
        "parent_id": parent["span_id"] if parent is not None else None,
        "name": name,
        "status": {"status_code": status_code, "description": status.description if status is not None else None},
        "attributes": attributes,
        "events": [{"name": e.name, "attributes": _attrs(e.attributes), "timestamp": _seconds(e.timestamp)} for e in span.events],
        "links": [
            {"context": _context(link.context), "attributes": _attrs(link.attributes)}
            for link in span.links
            if link.context is not None
        ],
        "start_time": _seconds(span.start_time),
        "end_time": _seconds(span.end_time),
        "context": context,
        "parent": parent,
        "resource": {"attributes": resource, "schema_url": (span.resource.schema_url or "") if span.resource is not None else ""},
        "kind": span.kind.name if span.kind is not None else "INTERNAL",
    }


def core_to_doc(
    core: SpanCoreFields,
    *,
    trace_id: str,
    span_id: str,
    parent_id: Optional[str],
    rollout_id: str,
    attempt_id: str,
    sequence_id: int,
    tracer_name: str = "agl-stream",
    extra_resource: Optional[Mapping[str, Any]] = None,
) -> SpanDoc:
    """An emitter's complete span (no OTel object behind it) as a Span-shaped dict."""
    resource = dict(extra_resource or {})
    resource.update(lightning_resource_attributes(rollout_id, attempt_id, sequence_id, tracer_name))
    context = {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}}
    return {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": sequence_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": parent_id,
        "name": core.name,
        "status": {"status_code": core.status.status_code, "description": core.status.description},
        "attributes": dict(core.attributes),
        "events": [],
        "links": [],
        "start_time": core.start_time,
        "end_time": core.end_time,
        "context": context,
        "parent": {"trace_id": trace_id, "span_id": parent_id, "is_remote": False, "trace_state": {}} if parent_id else None,
        "resource": {"attributes": resource, "schema_url": ""},
        "kind": "INTERNAL",
    }


def encode_doc(doc: SpanDoc) -> bytes:
    """Envelope bytes of a span dict, identical in shape to ``serialization.encode(Span(...))``."""
    return _ENVELOPE_PREFIX + pydantic_core.to_json(doc, inf_nan_mode="null", fallback=repr) + b"}"


def doc_to_span(doc: SpanDoc) -> Span:
    return Span.model_validate(doc)


def readable_to_span(span: ReadableSpan, **ids: Any) -> Span:
    """Convert one finished OTel span into the model (same keywords as :func:`readable_to_doc`)."""
    return doc_to_span(readable_to_doc(span, **ids))
