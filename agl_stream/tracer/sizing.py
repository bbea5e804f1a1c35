"""Keep every span record under the broker's message limit without dropping it silently.

A span whose encoded record is too large gets its largest attribute values (and then event
attributes) truncated, largest first, until it fits. Every truncated key is listed in the span's
``agl.truncated`` attribute, and each string value ends with an explicit marker, so a consumer
always knows the record is not the original. Kafka's default limit is 1 MB.
"""

from __future__ import annotations

from typing import Any

from agl_stream.serialization import encode
from agl_stream.tracer.convert import doc_to_span, encode_doc
from agl_stream.types import Span

TRUNCATED_ATTRIBUTE = "agl.truncated"
MARKER = "...[agl-stream: truncated {dropped} of {total} chars]"
#: room kept for the envelope, the key and the truncation bookkeeping
HEADROOM = 1024


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_size(v) + 2 for v in value)
    return 8


def _shrink(value: Any, excess: int) -> Any:
    """Shorten a value by at least ``excess`` bytes (approximately), keeping its type."""
    if isinstance(value, str):
        keep = max(0, len(value) - excess - 64)
        return value[:keep] + MARKER.format(dropped=len(value) - keep, total=len(value))
    if isinstance(value, list):
        per_item = max(1, _size(value) // max(1, len(value)))
        keep = max(0, len(value) - excess // per_item - 1)
        return value[:keep]
    return value


def fit_doc(doc: dict[str, Any], limit: int) -> tuple[bytes, bool]:
    """Like :func:`fit_span` for a Span-shaped dict (the export path); only oversized spans become models."""
    payload = encode_doc(doc)
    if len(payload) <= limit:
        return payload, False
    return fit_span(doc_to_span(doc), limit)


def fit_span(span: Span, limit: int) -> tuple[bytes, bool]:
    """Encode ``span``; if larger than ``limit`` bytes, truncate its largest values. Returns (bytes, truncated)."""
    payload = encode(span)
    if len(payload) <= limit:
        return payload, False
    span = span.model_copy(deep=True)
    truncated: list[str] = []
    budget = limit - HEADROOM
    for _ in range(64):  # each round removes the largest value's excess; a few rounds always suffice
        excess = len(payload) - budget
        if excess <= 0:
            break
        candidates = [(key, span.attributes, _size(v)) for key, v in span.attributes.items() if key != TRUNCATED_ATTRIBUTE]
        for i, event in enumerate(span.events):
            candidates += [(f"events.{i}.{key}", event.attributes, _size(v)) for key, v in event.attributes.items()]
        if not candidates:
            break
        label, holder, size = max(candidates, key=lambda c: c[2])
        key = label.split(".", 2)[2] if label.startswith("events.") and holder is not span.attributes else label
        if size <= 16:
            break
        holder[key] = _shrink(holder[key], min(excess, size))
        if label not in truncated:
            truncated.append(label)
        span.attributes[TRUNCATED_ATTRIBUTE] = truncated
        payload = encode(span)
    if len(payload) > limit:
        raise ValueError(f"span {span.span_id} ({span.name}) cannot be made smaller than {limit} bytes")
    return payload, True
