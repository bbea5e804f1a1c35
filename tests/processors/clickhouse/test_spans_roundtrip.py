"""Spans written to the otel_traces layout come back as the same agl Span models."""

from __future__ import annotations

import secrets

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agl_stream.types import Span, TraceStatus
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.clickhouse.columns import ColumnBatch, RowError, seconds_to
from agl_stream_processors.clickhouse.spans import SPAN_COLUMNS, SPAN_SCHEMA, span_to_row, spans_from_arrow
from tests.processors.clickhouse.store import make_span, rich_span


def _store_and_read(ch: ClickHouse, spans: list[Span]) -> list[Span]:
    batch = ColumnBatch(SPAN_SCHEMA, [span_to_row(s, 1_700_000_000_000) for s in spans])
    ch.insert_arrow("spans", batch.to_arrow())
    return spans_from_arrow(ch.query_arrow(f"SELECT {SPAN_COLUMNS} FROM spans FINAL ORDER BY SequenceId"))


def _normalized(span: Span) -> dict:
    """Times compared as the integer nanoseconds DateTime64(9) keeps.

    Converted with the sink's own exact conversion: ``round(seconds * 1e9)`` is off by one
    nanosecond for some floats (the product rounds), which is the test's error, not the store's.
    """
    data = span.model_dump()
    for key in ("start_time", "end_time"):
        data[key] = seconds_to(data[key], 1_000_000_000, key)
    for event in data["events"]:
        event["timestamp"] = seconds_to(event["timestamp"], 1_000_000_000, "event timestamp")
    return data


def test_spans_round_trip_through_clickhouse(ch: ClickHouse) -> None:
    originals = [make_span(sequence_id=1), rich_span(), make_span(sequence_id=9, end_time=None, attributes={})]
    restored = _store_and_read(ch, originals)
    assert [_normalized(s) for s in restored] == [_normalized(s) for s in originals]
    restored_rich = restored[1]
    assert restored_rich.attributes["prompt_token_ids"] == [1, 2, 3]
    assert restored_rich.attributes["numeric_string"] == "42"  # strings stay strings
    assert restored_rich.attributes["flag"] is True


def test_otel_columns_are_readable_by_trace_tooling(ch: ClickHouse) -> None:
    _store_and_read(ch, [rich_span()])
    cols, rows = ch.query_rows(
        "SELECT SpanAttributes['gen_ai.request.model'], StatusCode, SpanKind, ServiceName, Duration, "
        "Events.Name, Links.TraceState FROM spans"
    )
    assert rows == [("tiny", "Error", "Client", "agent", 1_250_000_000, ["exception", "no-time"], ["k=v,z=1"])]


def test_replayed_spans_collapse_to_one_row(ch: ClickHouse) -> None:
    spans = [make_span(sequence_id=i) for i in range(1, 6)]
    for _ in range(3):
        _store_and_read(ch, spans)
    assert ch.scalar("SELECT count() FROM spans FINAL") == 5
    assert ch.scalar("SELECT count() FROM (SELECT RolloutId, AttemptId, SpanId FROM spans GROUP BY ALL)") == 5


def test_span_start_falls_back_to_end_then_record_time() -> None:
    assert span_to_row(make_span(start_time=None, end_time=5.0))["Timestamp"] == 5_000_000_000
    assert span_to_row(make_span(start_time=None, end_time=None), 1234)["Timestamp"] == 1_234_000_000


@pytest.mark.parametrize(
    "span, reason",
    [
        (make_span(start_time=10.0, end_time=5.0), "before start_time"),
        (make_span(start_time=float("nan")), "finite"),
        (make_span(start_time=-1.0), "non-negative"),
    ],
)
def test_unstorable_times_are_row_errors(span: Span, reason: str) -> None:
    with pytest.raises(RowError, match=reason):
        span_to_row(span)


_scalars = (
    st.text(max_size=20)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.none()
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    attributes=st.dictionaries(st.text(min_size=1, max_size=30), _values, max_size=6),
    start=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    duration=st.none() | st.floats(min_value=0, max_value=1e5, allow_nan=False),
    status=st.sampled_from(["UNSET", "OK", "ERROR"]),
    kind=st.sampled_from(["INTERNAL", "CLIENT", "SERVER", "custom-kind"]),
)
@example(attributes={}, start=1125900.3511827886, duration=None, status="UNSET", kind="INTERNAL")  # CI found it
def test_any_attributes_round_trip(
    ch: ClickHouse, attributes: dict, start: float, duration: float | None, status: str, kind: str
) -> None:
    span = make_span(span_id=secrets.token_hex(8), attributes=attributes, start_time=start,
                     end_time=None if duration is None else start + duration)  # fmt: skip
    span = span.model_copy(update={"status": TraceStatus(status_code=status), "kind": kind})  # type: ignore[arg-type]
    ch.insert_arrow("spans", ColumnBatch(SPAN_SCHEMA, [span_to_row(span)]).to_arrow())
    table = ch.query_arrow(f"SELECT {SPAN_COLUMNS} FROM spans FINAL WHERE SpanId = {{id:String}}", {"id": span.span_id})
    (restored,) = spans_from_arrow(table)
    assert restored.attributes == span.attributes
    assert _normalized(restored) == _normalized(span)
