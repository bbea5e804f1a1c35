"""Span records of many shapes, for the fast paths that read our encoder's JSON without the model.

Each fast path (the span sink's rows, the triplet processor's spans) must give exactly what the
pydantic model gives, or step aside. These records cover what runners write (the benchmark
workload's random attributes), the golden adapter corpus, attribute values of every JSON type,
missing and integer times, contexts, statuses and kinds, and hand-edited JSON our encoder never
writes (integer times, missing optional keys, extra keys, escapes).
"""

from __future__ import annotations

import random
from typing import Any

from agl_stream.serialization import encode
from agl_stream.types import Event, Link, Span, SpanContext, TraceStatus
from tests.agl_stream.adapter.golden.cases import golden_cases
from tests.benchmarks.workload_agent import random_attributes

ROLLOUT, ATTEMPT, TRACE = "ro-000000000001", "at-00000001", "a" * 32

#: attribute values of every type a span may carry, and strings that need escaping
ODD_VALUES: dict[str, Any] = {
    "int": 3, "negative": -7, "big": 2**62, "zero": 0, "float": 1.5, "tiny": 1e-7, "huge": 1e300, "minus_zero": -0.0,
    "whole_float": 2.0, "true": True, "false": False, "none": None, "ids": [1, 2, 3], "mixed": [1, "a", 2.5, None, True],
    "nested": {"a": {"b": [1, {"c": "d"}]}}, "empty_dict": {}, "empty_list": [], "nan": float("nan"),
    "unicode": "héllo ✓ 😀", "escapes": 'a"b\\c\n\t\u0001', "empty": "", "digits": "123",
}  # fmt: skip


def _span(i: int, rng: random.Random, **update: Any) -> Span:
    base: dict[str, Any] = dict(
        rollout_id=ROLLOUT, attempt_id=ATTEMPT, sequence_id=i, trace_id=TRACE, span_id=f"{i:016x}",
        parent_id=None if i % 3 == 0 else "c" * 16, name="workload.llm", attributes=random_attributes(rng),
        start_time=1_800_000_000.25 + i, end_time=None if i % 5 == 0 else 1_800_000_001.5 + i,
        resource={"attributes": {"service.name": "agent", "agentlightning.rollout_id": ROLLOUT,
                                 "agentlightning.span_sequence_id": i, "agentlightning.tracer.name": "otel"}},
        context=SpanContext(trace_id=TRACE, span_id=f"{i:016x}", trace_state={"k": "v", "x": "y=z"} if i % 4 == 0 else {}),
        parent=SpanContext(trace_id=TRACE, span_id="c" * 16, is_remote=bool(i % 2)) if i % 3 else None,
    )  # fmt: skip
    base.update(update)
    return Span(**base)


def varied_spans() -> list[Span]:
    """Spans as the model holds them (encoded with :func:`encode` they are what producers write)."""
    rng = random.Random(7)
    spans = [_span(i, rng) for i in range(40)]
    spans += [
        _span(40, rng, attributes=dict(ODD_VALUES)),
        _span(41, rng, attributes={}, resource={"attributes": {"service.name": 5}, "schema_url": "https://x/1.0"}),
        _span(42, rng, start_time=None, end_time=None, context=None, parent=None, parent_id=None),
        _span(43, rng, start_time=None, end_time=1_800_000_009.0),
        _span(44, rng, kind="server", status=TraceStatus(status_code="ERROR", description="boom ✓")),
        _span(45, rng, kind="Consumer", status=TraceStatus(status_code="OK")),
        _span(46, rng, kind="something-else", sequence_id=0, parent_id=""),
        _span(47, rng, sequence_id=2**40, start_time=0.0, end_time=0.0),
        _span(48, rng, start_time=1_800_000_000.123456789, end_time=1_800_000_000.987654321),
        _span(49, rng, events=[Event(name="e", attributes={"n": 1}, timestamp=1.5)]),
        _span(50, rng, links=[Link(context=SpanContext(trace_id=TRACE, span_id="d" * 16), attributes={"k": "v"})]),
    ]
    spans += [span for case in golden_cases() for span in case.spans]
    return spans


def _edited(raw: bytes, old: bytes, new: bytes) -> bytes:
    assert old in raw, (old, raw[:200])
    return raw.replace(old, new, 1)


def varied_records() -> list[bytes]:
    """The spans' records, plus JSON our encoder does not write but other producers might."""
    spans = varied_spans()
    records = [encode(span) for span in spans]
    plain = encode(_span(60, random.Random(1), start_time=1_800_000_000.0, end_time=1_800_000_002.0))
    records += [
        _edited(plain, b'"start_time":1800000000.0', b'"start_time":1800000000'),  # integer times
        _edited(plain, b'"end_time":1800000002.0', b'"end_time":1800000002'),
        _edited(plain, b'"kind":"INTERNAL"', b'"kind":"INTERNAL","extra":{"x":1}'),  # a key the model ignores
        _edited(plain, b',"events":[]', b""),  # optional keys left out: the model's defaults
        _edited(plain, b',"links":[]', b""),
        _edited(plain, b'"parent":null,', b""),
        _edited(plain, b'"description":null', b'"description":"a\\u00e9\\"b"'),  # escapes our encoder does not write
        _edited(plain, b'"is_remote":false', b'"is_remote":true'),
    ]
    return records
