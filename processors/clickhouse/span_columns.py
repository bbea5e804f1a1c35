"""The span sink's table builder: ``spans`` rows kept as tuples, turned into columns once per batch.

Spans are most of the traffic, and the generic path (a dict per row, then a list per column, then
``pa.array`` of per-row ``(key, value)`` pairs for the attribute maps) spent more time on Python
objects than on the data. Here a row is one tuple in schema order whose attribute maps are plain
dicts; :meth:`SpanColumns.to_arrow` transposes the tuples and builds the maps from flat keys and
values (:func:`~agl_stream_processors.clickhouse.columns.map_array`).

:meth:`SpanColumns.add_record` reads the plain shape agl-stream's own encoder writes (no events or
links, every field of the type the model declares) straight from the JSON, without the pydantic
model, and computes what :func:`~agl_stream_processors.clickhouse.spans.span_to_row` computes from the
decoded :class:`~agl_stream.types.Span` (a test holds the two to the same arrow table). Anything else
is left to the model, which decodes, validates and, if needed, dead-letters it.
"""

from __future__ import annotations

from typing import Any, Optional

import orjson
import pyarrow as pa

from agl_stream.client.span_rows import KIND_TO_OTEL, STATUS_TO_OTEL
from agl_stream_processors.clickhouse.columns import RowError, arrow_array, map_array, seconds_to
from agl_stream_processors.clickhouse.spans import (
    SERVICE_NAME, SPAN_SCHEMA, TRACER_NAME, encode_map, encode_trace_state,
)  # fmt: skip

_NAMES = tuple(SPAN_SCHEMA.names)
_MAPS = frozenset(("SpanAttributes", "ResourceAttributes"))
_SPAN_PREFIX = b'{"schema":"span","v":1,"data":'  # what agl_stream.serialization.encode writes
_STATUS_CODES = frozenset(STATUS_TO_OTEL)
_NS = 1_000_000_000


class SpanColumns:
    """Rows of the ``spans`` table, appended record by record, converted to arrow once."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        """Rows of :func:`~agl_stream_processors.clickhouse.spans.span_to_row` (the model path)."""
        for row in rows:
            self.rows.append(tuple(dict(row[name]) if name in _MAPS else row[name] for name in _NAMES))

    def add_record(self, raw: Optional[bytes], record_timestamp_ms: Optional[int] = None) -> bool:
        """Append the row of a plain span record; False (nothing appended) for any other shape.

        Raises :class:`RowError` where :func:`span_to_row` would (a value ClickHouse cannot hold)."""
        doc = _plain_span(raw)
        if doc is None:
            return False
        self.rows.append(_row(doc, record_timestamp_ms))
        return True

    def to_arrow(self) -> pa.Table:
        columns = list(zip(*self.rows)) if self.rows else [()] * len(_NAMES)
        arrays = [
            map_array(values, f.type) if f.name in _MAPS else arrow_array(list(values), f.type)
            for f, values in zip(SPAN_SCHEMA, columns)
        ]
        return pa.Table.from_arrays(arrays, schema=SPAN_SCHEMA)


def _plain_span(raw: Optional[bytes]) -> Optional[dict[str, Any]]:
    """The data of a span record in the plain shape our encoder writes, else None (see the module doc)."""
    if raw is None or not raw.startswith(_SPAN_PREFIX) or not raw.endswith(b"}"):
        return None
    try:
        doc = orjson.loads(memoryview(raw)[len(_SPAN_PREFIX) : -1])
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    get = doc.get
    status, resource, seq, parent_id = get("status"), get("resource"), get("sequence_id"), get("parent_id")
    if not (
        all(type(get(k)) is str for k in ("rollout_id", "attempt_id", "trace_id", "span_id", "name", "kind"))
        and type(seq) is int and seq >= 0
        and (parent_id is None or type(parent_id) is str)
        and _number(get("start_time")) and _number(get("end_time"))
        and type(get("attributes")) is dict
        and type(status) is dict and status.get("status_code") in _STATUS_CODES
        and (status.get("description") is None or type(status.get("description")) is str)
        and type(resource) is dict and type(resource.get("attributes")) is dict and type(resource.get("schema_url")) is str
        and get("events") == [] and get("links") == [] and _context(get("context")) and _context(get("parent"))
    ):  # fmt: skip
        return None
    return doc


def _number(value: Any) -> bool:
    return value is None or type(value) in (int, float)


def _context(value: Any) -> bool:
    """A SpanContext document (or None) as the model would accept it."""
    if value is None:
        return True
    if type(value) is not dict or type(value.get("trace_id")) is not str or type(value.get("span_id")) is not str:
        return False
    state = value.get("trace_state", {})
    return type(value.get("is_remote", False)) is bool and type(state) is dict and all(type(v) is str for v in state.values())


def _seconds(value: Optional[float]) -> Optional[float]:
    return float(value) if value is not None else None  # the model's float field


def _row(doc: dict[str, Any], record_timestamp_ms: Optional[int]) -> tuple[Any, ...]:
    """:func:`span_to_row` of the span ``doc`` describes, in schema order (plain shape: no events or links)."""
    start_time, end_time = _seconds(doc.get("start_time")), _seconds(doc.get("end_time"))
    start = seconds_to(start_time, _NS, "start_time")
    end = seconds_to(end_time, _NS, "end_time")
    if start is None:
        start = end if end is not None else (record_timestamp_ms or 0) * 1_000_000
    if end is not None and end < start:
        raise RowError(f"end_time {end_time} is before start_time {start_time}")
    span_attrs, span_json = encode_map(doc["attributes"])
    resource = doc["resource"]
    res_map = resource["attributes"]
    res_attrs, res_json = encode_map(res_map)
    context, status, kind = doc.get("context"), doc["status"], doc["kind"]
    return (
        start,  # Timestamp
        doc["trace_id"],
        doc["span_id"],
        doc.get("parent_id") or "",
        encode_trace_state(context.get("trace_state", {})) if context is not None else "",
        doc["name"],
        KIND_TO_OTEL.get(kind.upper(), kind),
        str(res_map.get(SERVICE_NAME, "")),
        res_attrs,  # ResourceAttributes
        str(res_map.get(TRACER_NAME, "")),
        "",  # ScopeVersion
        span_attrs,  # SpanAttributes
        (end - start) if end is not None else 0,  # Duration
        STATUS_TO_OTEL[status["status_code"]],
        status.get("description") or "",
        [], [], [], [],  # Events.Timestamp, .Name, .Attributes, .JsonKeys
        [], [], [], [], [],  # Links.TraceId, .SpanId, .TraceState, .Attributes, .JsonKeys
        doc["rollout_id"],
        doc["attempt_id"],
        doc["sequence_id"],
        span_json,  # SpanAttributesJsonKeys
        res_json,  # ResourceAttributesJsonKeys
        resource["schema_url"],
        end is None,  # EndTimeMissing
    )
