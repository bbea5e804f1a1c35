"""The span sink's builder: straight from the bytes it gives the model path's table, or steps aside."""

from __future__ import annotations

import pytest

from agl_stream.serialization import decode, encode
from agl_stream.types import Event, Span
from agl_stream_processors.clickhouse.columns import ColumnBatch, RowError
from agl_stream_processors.clickhouse.span_columns import SpanColumns
from agl_stream_processors.clickhouse.spans import SPAN_SCHEMA, span_to_row
from tests.agl_stream.varied_spans import varied_records


def _model_table(records: list[bytes], record_timestamp_ms: int) -> object:
    """What the generic path inserts: the decoded span's ``span_to_row`` dicts, column by column."""
    rows = [span_to_row(decode(raw, Span), record_timestamp_ms) for raw in records]
    return ColumnBatch(SPAN_SCHEMA, rows).to_arrow()


def test_the_fast_path_gives_the_model_paths_table_for_every_record_it_takes() -> None:
    taken: list[bytes] = []
    for raw in varied_records():
        one = SpanColumns()
        if one.add_record(raw, 1234):
            taken.append(raw)
            assert one.to_arrow().equals(_model_table([raw], 1234)), raw[:300]
        else:  # only shapes it leaves to the model, and then it appends nothing
            assert len(one) == 0
            span = decode(raw, Span)
            assert span.events or span.links or b'"events"' not in raw or b'"links"' not in raw
    assert len(taken) >= 100  # runners' plain spans, the golden corpus, the odd values all take it
    batch = SpanColumns()  # many rows at once: the maps' offsets line up
    for raw in taken:
        assert batch.add_record(raw, 99)
    assert batch.to_arrow().equals(_model_table(taken, 99))


def test_the_model_paths_rows_build_the_same_table_as_column_batch() -> None:
    records = varied_records()
    rows = [span_to_row(decode(raw, Span), 5) for raw in records]
    builder = SpanColumns()
    builder.add_rows(rows)
    assert builder.to_arrow().equals(ColumnBatch(SPAN_SCHEMA, rows).to_arrow())
    assert SpanColumns().to_arrow().equals(ColumnBatch(SPAN_SCHEMA).to_arrow())  # an empty batch


@pytest.mark.parametrize(
    "broken",
    [
        b"garbage",
        b'{"schema":"span","v":1,"data":[1,2]}',
        b'{"schema":"span","v":1,"data":{"rollout_id":5}}',
        b'{"schema":"span","v":1,"data":{"rollout_id":"r"}} trailing',
        None,
    ],
)
def test_anything_unusual_is_left_to_the_model(broken: bytes | None) -> None:
    builder = SpanColumns()
    assert not builder.add_record(broken)
    assert len(builder) == 0


def test_wrong_types_are_left_to_the_model_which_rejects_them() -> None:
    good = Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=1, trace_id="a" * 32,
                span_id="b" * 16, name="x", start_time=1.0, end_time=2.0)  # fmt: skip
    raw = encode(good)
    assert SpanColumns().add_record(raw)
    for old, new in ((b'"sequence_id":1', b'"sequence_id":-1'), (b'"sequence_id":1', b'"sequence_id":true'),
                     (b'"sequence_id":1', b'"sequence_id":1.0'), (b'"start_time":1.0', b'"start_time":"soon"'),
                     (b'"start_time":1.0', b'"start_time":true'), (b'"status_code":"UNSET"', b'"status_code":"MAYBE"'),
                     (b'"context":null', b'"context":{"trace_id":1}'), (b'"name":"x"', b'"name":null'),
                     (b'"attributes":{}', b'"attributes":[]')):  # fmt: skip
        assert old in raw
        assert not SpanColumns().add_record(raw.replace(old, new))
    with_event = good.model_copy(update={"events": [Event(name="e", timestamp=1.5)]})
    assert not SpanColumns().add_record(encode(with_event))


def test_values_clickhouse_cannot_hold_fail_as_the_model_path_fails() -> None:
    backwards = Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=1, trace_id="a" * 32,
                     span_id="b" * 16, name="x", start_time=2.0, end_time=1.0)  # fmt: skip
    negative = encode(backwards.model_copy(update={"start_time": -1.0}))
    for raw in (encode(backwards), negative, negative.replace(b'"start_time":-1.0', b'"start_time":-1')):
        with pytest.raises(RowError) as model:
            span_to_row(decode(raw, Span), None)
        builder = SpanColumns()
        with pytest.raises(RowError) as fast:
            builder.add_record(raw)
        assert str(fast.value) == str(model.value)  # the dead letter's reason
        assert len(builder) == 0
