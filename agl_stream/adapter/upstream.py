"""Upstream adapter base names with no separate implementation here.

``TraceToTripletBase`` is upstream's base of the span -> triplet adapters: here they derive from
:class:`TraceAdapter` directly, so the name is that class (``isinstance(TracerTraceToTriplet(),
TraceToTripletBase)`` holds). :class:`OtelTraceAdapter` adapts raw OpenTelemetry ``ReadableSpan`` lists.
"""

from __future__ import annotations

from typing import Generic, Sequence, TypeVar

from opentelemetry.sdk.trace import ReadableSpan

from agl_stream.adapter.base import Adapter, TraceAdapter

T_to = TypeVar("T_to")

TraceToTripletBase = TraceAdapter


class OtelTraceAdapter(Adapter[Sequence[ReadableSpan], T_to], Generic[T_to]):
    """Base class of adapters over OpenTelemetry ``ReadableSpan`` lists (subclasses implement ``adapt``)."""
