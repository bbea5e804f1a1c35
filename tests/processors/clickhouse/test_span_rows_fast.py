"""The span sink's fast path builds exactly the rows the model path builds, or steps aside."""

from __future__ import annotations

import random

import pytest

from agl_stream.serialization import encode
from agl_stream.types import Event, Span, SpanContext
from agl_stream_processors.clickhouse.spans import span_rows_from_record, span_to_row
from tests.agl_stream.adapter.golden.cases import golden_cases
from tests.benchmarks.workload_agent import random_attributes


def _spans() -> list[Span]:
    rng = random.Random(7)
    made = [
        Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=i, trace_id="a" * 32, span_id=f"{i:016x}",
             parent_id=None if i % 3 == 0 else "c" * 16, name="workload.llm", attributes=random_attributes(rng),
             start_time=1_800_000_000.25 + i, end_time=None if i % 5 == 0 else 1_800_000_001.5 + i,
             resource={"attributes": {"service.name": "agent", "agentlightning.rollout_id": "ro-000000000001"}},
             context=SpanContext(trace_id="a" * 32, span_id=f"{i:016x}", trace_state={"k": "v"} if i % 4 == 0 else {}),
             parent=SpanContext(trace_id="a" * 32, span_id="c" * 16) if i % 3 else None)
        for i in range(40)
    ]  # fmt: skip
    made.append(made[1].model_copy(update={"attributes": {"n": 3, "f": 1.5, "b": True, "ids": [1, 2, 3], "s": "x"}}))
    return made + [span for case in golden_cases() for span in case.spans]


def test_the_fast_path_gives_the_model_paths_row_for_every_span_it_takes() -> None:
    taken = 0
    for span in _spans():
        rows = span_rows_from_record(encode(span), 1234)
        if rows is not None:
            taken += 1
            assert rows == [span_to_row(span, 1234)], span.span_id
        else:  # only shapes it leaves to the model
            assert span.events or span.links
    assert taken >= 40  # the plain spans runners write all take it


@pytest.mark.parametrize(
    "broken",
    [
        b"garbage",
        b'{"schema":"span","v":1,"data":[1,2]}',
        b'{"schema":"span","v":1,"data":{"rollout_id":5}}',
        None,
    ],
)
def test_anything_unusual_is_left_to_the_model(broken: bytes | None) -> None:
    assert span_rows_from_record(broken) is None


def test_wrong_types_are_left_to_the_model_which_rejects_them() -> None:
    good = Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=1, trace_id="a" * 32,
                span_id="b" * 16, name="x", start_time=1.0, end_time=2.0)  # fmt: skip
    raw = encode(good)
    assert span_rows_from_record(raw) is not None
    for old, new in ((b'"sequence_id":1', b'"sequence_id":-1'), (b'"sequence_id":1', b'"sequence_id":true'),
                     (b'"start_time":1.0', b'"start_time":"soon"'), (b'"status_code":"UNSET"', b'"status_code":"MAYBE"'),
                     (b'"context":null', b'"context":{"trace_id":1}')):  # fmt: skip
        assert old in raw
        assert span_rows_from_record(raw.replace(old, new)) is None
    with_event = good.model_copy(update={"events": [Event(name="e", timestamp=1.5)]})
    assert span_rows_from_record(encode(with_event)) is None
