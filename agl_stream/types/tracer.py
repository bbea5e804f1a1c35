"""Upstream's ``agentlightning.types.tracer`` path: the span model and its typing helpers.

agl-stream defines them in :mod:`agl_stream.types.spans` (the models) and
:mod:`agl_stream.types.upstream` (upstream's typing aliases and protocols); this module gathers them
under upstream's module name so ``from agl_stream.types.tracer import Span`` keeps working.
"""

from __future__ import annotations

from agl_stream.types.spans import Event, Link, OtelResource, Span, SpanContext, SpanCoreFields, TraceStatus
from agl_stream.types.upstream import (
    Attributes,
    AttributeValue,
    SpanAttributeNames,
    SpanLike,
    SpanNames,
    SpanRecordingContext,
    StatusCode,
    TraceState,
)

__all__ = [
    "AttributeValue",
    "Attributes",
    "Event",
    "Link",
    "OtelResource",
    "Span",
    "SpanAttributeNames",
    "SpanContext",
    "SpanCoreFields",
    "SpanLike",
    "SpanNames",
    "SpanRecordingContext",
    "StatusCode",
    "TraceState",
    "TraceStatus",
]
