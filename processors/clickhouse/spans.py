"""Spans to ``spans`` rows (the OpenTelemetry ``otel_traces`` layout) and back, without loss.

The read side (:func:`span_from_row`) is shared with the SDK's ``StoreClient`` and lives in
:mod:`agl_stream.client.span_rows`; it is re-exported here.

Attribute maps in ClickHouse hold strings. String values are stored as they are (so SQL and
Grafana read ``SpanAttributes['gen_ai.request.model']`` naturally); every other value (numbers,
bools, lists such as ``prompt_token_ids``) is stored as JSON and its key is listed in the
matching ``*JsonKeys`` column, which is how :func:`span_from_row` restores the original types.
Times are nanoseconds; a span without an end time is stored with ``Duration = 0`` and
``EndTimeMissing``; a span without a start time uses its end time, else the Kafka record time.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import pyarrow as pa

from agl_stream.client.span_rows import KIND_TO_OTEL, STATUS_TO_OTEL, decode_attributes, decode_trace_state, span_from_row
from agl_stream.types import Span
from agl_stream_processors.clickhouse.columns import STR_LIST, STR_MAP, UTC_NS, RowError, seconds_to, to_json

SPAN_SCHEMA = pa.schema(
    [
        ("Timestamp", UTC_NS),
        ("TraceId", pa.string()),
        ("SpanId", pa.string()),
        ("ParentSpanId", pa.string()),
        ("TraceState", pa.string()),
        ("SpanName", pa.string()),
        ("SpanKind", pa.string()),
        ("ServiceName", pa.string()),
        ("ResourceAttributes", STR_MAP),
        ("ScopeName", pa.string()),
        ("ScopeVersion", pa.string()),
        ("SpanAttributes", STR_MAP),
        ("Duration", pa.uint64()),
        ("StatusCode", pa.string()),
        ("StatusMessage", pa.string()),
        ("Events.Timestamp", pa.list_(UTC_NS)),
        ("Events.Name", STR_LIST),
        ("Events.Attributes", pa.list_(STR_MAP)),
        ("Events.JsonKeys", pa.list_(STR_LIST)),
        ("Links.TraceId", STR_LIST),
        ("Links.SpanId", STR_LIST),
        ("Links.TraceState", STR_LIST),
        ("Links.Attributes", pa.list_(STR_MAP)),
        ("Links.JsonKeys", pa.list_(STR_LIST)),
        ("RolloutId", pa.string()),
        ("AttemptId", pa.string()),
        ("SequenceId", pa.uint64()),
        ("SpanAttributesJsonKeys", STR_LIST),
        ("ResourceAttributesJsonKeys", STR_LIST),
        ("ResourceSchemaUrl", pa.string()),
        ("EndTimeMissing", pa.bool_()),
    ]
)

SERVICE_NAME = "service.name"
TRACER_NAME = "agentlightning.tracer.name"
_STR_ONLY = frozenset({str})


def encode_map(attributes: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """(the map's entries, keys whose values are JSON) for an attribute dict.

    A dict of plain strings (most of them) is its own map: the type check runs in C."""
    if set(map(type, attributes.values())) <= _STR_ONLY:
        return attributes, []
    encoded: dict[str, str] = {}
    json_keys: list[str] = []
    for key, value in attributes.items():
        if type(value) is str:
            encoded[key] = value
        elif isinstance(value, str):  # a str subclass (an enum value): keep the plain text
            encoded[key] = str(value)
        else:
            encoded[key] = to_json(value)
            json_keys.append(key)
    return encoded, json_keys


def encode_attributes(attributes: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """(map entries, keys whose values are JSON) for an attribute dict."""
    encoded, json_keys = encode_map(attributes if isinstance(attributes, dict) else dict(attributes))
    return list(encoded.items()), json_keys


def encode_trace_state(state: Mapping[str, str]) -> str:
    """W3C tracestate header form: ``k1=v1,k2=v2``."""
    return ",".join(f"{k}={v}" for k, v in state.items())


_NO_EVENTS: dict[str, list[Any]] = {
    name: [] for name in ("Events.Timestamp", "Events.Name", "Events.Attributes", "Events.JsonKeys")
}
_NO_LINKS: dict[str, list[Any]] = {
    name: [] for name in ("Links.TraceId", "Links.SpanId", "Links.TraceState", "Links.Attributes", "Links.JsonKeys")
}


def _events_columns(span: Span) -> dict[str, list[Any]]:
    encoded = [encode_attributes(e.attributes) for e in span.events]
    return {
        "Events.Timestamp": [seconds_to(e.timestamp, 1_000_000_000, "event timestamp") or 0 for e in span.events],
        "Events.Name": [e.name for e in span.events],
        "Events.Attributes": [a for a, _ in encoded],
        "Events.JsonKeys": [k for _, k in encoded],
    }


def _links_columns(span: Span) -> dict[str, list[Any]]:
    encoded = [encode_attributes(link.attributes) for link in span.links]
    return {
        "Links.TraceId": [link.context.trace_id for link in span.links],
        "Links.SpanId": [link.context.span_id for link in span.links],
        "Links.TraceState": [encode_trace_state(link.context.trace_state) for link in span.links],
        "Links.Attributes": [a for a, _ in encoded],
        "Links.JsonKeys": [k for _, k in encoded],
    }


def span_to_row(span: Span, record_timestamp_ms: Optional[int] = None) -> dict[str, Any]:
    """One ``spans`` row; raises :class:`RowError` for values ClickHouse cannot hold."""
    start = seconds_to(span.start_time, 1_000_000_000, "start_time")
    end = seconds_to(span.end_time, 1_000_000_000, "end_time")
    if start is None:
        start = end if end is not None else (record_timestamp_ms or 0) * 1_000_000
    if end is not None and end < start:
        raise RowError(f"end_time {span.end_time} is before start_time {span.start_time}")
    span_attrs, span_json = encode_attributes(span.attributes)
    res_attrs, res_json = encode_attributes(span.resource.attributes)
    res_map = span.resource.attributes
    trace_state = encode_trace_state(span.context.trace_state) if span.context is not None else ""
    return {
        "Timestamp": start,
        "TraceId": span.trace_id,
        "SpanId": span.span_id,
        "ParentSpanId": span.parent_id or "",
        "TraceState": trace_state,
        "SpanName": span.name,
        "SpanKind": KIND_TO_OTEL.get(span.kind.upper(), span.kind),
        "ServiceName": str(res_map.get(SERVICE_NAME, "")),
        "ResourceAttributes": res_attrs,
        "ScopeName": str(res_map.get(TRACER_NAME, "")),
        "ScopeVersion": "",
        "SpanAttributes": span_attrs,
        "Duration": (end - start) if end is not None else 0,
        "StatusCode": STATUS_TO_OTEL[span.status.status_code],
        "StatusMessage": span.status.description or "",
        **(_events_columns(span) if span.events else _NO_EVENTS),
        **(_links_columns(span) if span.links else _NO_LINKS),
        "RolloutId": span.rollout_id,
        "AttemptId": span.attempt_id,
        "SequenceId": span.sequence_id,
        "SpanAttributesJsonKeys": span_json,
        "ResourceAttributesJsonKeys": res_json,
        "ResourceSchemaUrl": span.resource.schema_url,
        "EndTimeMissing": end is None,
    }


SPAN_COLUMNS = ", ".join(f"`{name}`" for name in SPAN_SCHEMA.names)


def spans_from_arrow(table: pa.Table) -> list[Span]:
    """Spans from an arrow result of ``SELECT {SPAN_COLUMNS} FROM spans ...``."""
    return [span_from_row(row) for row in _arrow_rows(table)]


def _arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with timestamps kept as integer nanoseconds (``to_pylist`` would go through datetime)."""
    columns: dict[str, list[Any]] = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            columns[name] = col.cast(pa.int64()).to_pylist()
        elif pa.types.is_list(col.type) and pa.types.is_timestamp(col.type.value_type):
            columns[name] = col.cast(pa.list_(pa.int64())).to_pylist()
        else:
            columns[name] = col.to_pylist()
    return [{name: columns[name][i] for name in columns} for i in range(table.num_rows)]


__all__ = [
    "SPAN_COLUMNS",
    "SPAN_SCHEMA",
    "decode_attributes",
    "decode_trace_state",
    "encode_attributes",
    "encode_map",
    "encode_trace_state",
    "span_from_row",
    "span_to_row",
    "spans_from_arrow",
]
