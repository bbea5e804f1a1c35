"""Rows of the ClickHouse ``spans`` table (the OpenTelemetry ``otel_traces`` layout) back to agl spans.

The write side lives with the span sink (``agl_stream_processors.clickhouse.spans``); the read side
is here because both the sink's tools (replay) and the SDK's ``StoreClient.query_spans`` read rows.
Attribute maps hold strings; keys listed in the ``*JsonKeys`` columns hold JSON (numbers, bools,
lists such as ``prompt_token_ids``), which is how the original types come back. Timestamps are
integer nanoseconds (or anything :func:`to_ns` understands).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Mapping

from agl_stream.types import Event, Link, OtelResource, Span, SpanContext, TraceStatus

# OTel status/kind spellings as the ClickHouse exporter writes them, and back.
STATUS_TO_OTEL = {"UNSET": "Unset", "OK": "Ok", "ERROR": "Error"}
STATUS_FROM_OTEL = {v: k for k, v in STATUS_TO_OTEL.items()}
KINDS = ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER", "UNSPECIFIED")
KIND_TO_OTEL = {k: k.capitalize() for k in KINDS}
KIND_FROM_OTEL = {v: k for k, v in KIND_TO_OTEL.items()}


def decode_attributes(entries: Iterable[tuple[str, str]] | Mapping[str, str], json_keys: Iterable[str]) -> dict[str, Any]:
    typed = set(json_keys)
    items = entries.items() if isinstance(entries, Mapping) else entries
    return {k: (json.loads(v) if k in typed else v) for k, v in items}


def decode_trace_state(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for member in filter(None, (m.strip() for m in text.split(","))):
        key, _, value = member.partition("=")
        out[key] = value
    return out


def to_ns(value: Any) -> int:
    """A timestamp column value (int ns, pandas Timestamp or datetime) as integer nanoseconds."""
    if isinstance(value, int):
        return value
    if hasattr(value, "value") and isinstance(value.value, int):  # pandas.Timestamp
        return int(value.value)
    if isinstance(value, datetime):
        return round(value.timestamp() * 1_000_000_000)
    raise TypeError(f"unexpected timestamp value {value!r}")


def _seconds(ns: int) -> float:
    return ns / 1_000_000_000


def span_from_row(row: Mapping[str, Any]) -> Span:
    """Rebuild the agl :class:`Span` from a ``spans`` row."""
    start_ns = to_ns(row["Timestamp"])
    end_ns = None if row["EndTimeMissing"] else start_ns + int(row["Duration"])
    trace_id, span_id = row["TraceId"], row["SpanId"]
    parent_id = row["ParentSpanId"] or None
    trace_state = decode_trace_state(row["TraceState"])
    events = [
        Event(name=name, attributes=decode_attributes(attrs, keys), timestamp=_seconds(to_ns(ts)) if to_ns(ts) else None)
        for ts, name, attrs, keys in zip(
            row["Events.Timestamp"], row["Events.Name"], row["Events.Attributes"], row["Events.JsonKeys"]
        )
    ]
    links = [
        Link(
            context=SpanContext(trace_id=tid, span_id=sid, trace_state=decode_trace_state(state)),
            attributes=decode_attributes(attrs, keys),
        )
        for tid, sid, state, attrs, keys in zip(
            row["Links.TraceId"], row["Links.SpanId"], row["Links.TraceState"], row["Links.Attributes"], row["Links.JsonKeys"]
        )
    ]
    status = STATUS_FROM_OTEL.get(row["StatusCode"], "UNSET")
    return Span(
        rollout_id=row["RolloutId"],
        attempt_id=row["AttemptId"],
        sequence_id=int(row["SequenceId"]),
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name=row["SpanName"],
        status=TraceStatus(status_code=status, description=row["StatusMessage"] or None),  # type: ignore[arg-type]
        attributes=decode_attributes(row["SpanAttributes"], row["SpanAttributesJsonKeys"]),
        events=events,
        links=links,
        start_time=_seconds(start_ns),
        end_time=_seconds(end_ns) if end_ns is not None else None,
        context=SpanContext(trace_id=trace_id, span_id=span_id, trace_state=trace_state),
        parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
        resource=OtelResource(
            attributes=decode_attributes(row["ResourceAttributes"], row["ResourceAttributesJsonKeys"]),
            schema_url=row["ResourceSchemaUrl"],
        ),
        kind=KIND_FROM_OTEL.get(row["SpanKind"], row["SpanKind"]),
    )
