"""OTLP protobuf / JSON -> agl Span conversion (pure logic, no server, no broker)."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_stream.serialization import decode, encode
from agl_stream.types import Span
from agl_stream_ingest.otlp.decode import OtlpDecodeError, parse_json, parse_protobuf, to_spans
from agl_stream_ingest.sequence import SequenceAllocator
from tests.ingest.otlp_samples import attempt_resource, export_request, otlp_span


def _to_otlp_json(request) -> bytes:  # type: ignore[no-untyped-def]
    """Proto3-JSON with ids rewritten to hex, i.e. what OTLP/JSON exporters send."""

    def hexify(node):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hexify(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [hexify(v) for v in node]
        return node

    return json.dumps(hexify(json_format.MessageToDict(request))).encode()


def test_span_fields_carry_over_from_protobuf() -> None:
    parent = b"\x01" * 8
    span = otlp_span(
        "openai.chat.completion",
        {"prompt_token_ids": [1, 2, 3], "gen_ai.request": {"model": "m", "temperature": 0.5}, "ok": True},
        trace_id=b"\xab" * 16,
        span_id=b"\x02" * 8,
        parent_span_id=parent,
        status_code=2,
    )
    request = export_request([span], attempt_resource("ro-1", "at-1", **{"service.name": "agent"}))
    out = to_spans(parse_protobuf(request.SerializeToString()), SequenceAllocator())
    assert out.rejected == []
    [got] = out.spans
    assert (got.rollout_id, got.attempt_id, got.sequence_id) == ("ro-1", "at-1", 1)
    assert got.trace_id == "ab" * 16 and got.span_id == "02" * 8 and got.parent_id == "01" * 8
    assert got.attributes["prompt_token_ids"] == [1, 2, 3]
    assert got.attributes["gen_ai.request.model"] == "m" and got.attributes["gen_ai.request.temperature"] == 0.5
    assert got.attributes["otel.scope.name"] == "tests"
    assert got.status.status_code == "ERROR" and got.kind == "CLIENT"
    assert got.start_time == pytest.approx(1_700_000_000.0) and got.end_time == pytest.approx(1_700_000_000.5)
    assert got.resource.attributes["service.name"] == "agent"
    assert got.resource.attributes["agentlightning.span_sequence_id"] == 1
    assert got.parent is not None and got.parent.span_id == "01" * 8
    assert decode(encode(got), Span) == got


def test_json_and_protobuf_give_the_same_spans() -> None:
    spans = [otlp_span("a", {"x": 1}, span_id=b"\x03" * 8), otlp_span("b", {"y": [0.5, 1.5]}, span_id=b"\x04" * 8)]
    request = export_request(spans, attempt_resource("ro-2", "at-2", **{"agentlightning.span_sequence_id": 7}))
    from_pb = to_spans(parse_protobuf(request.SerializeToString()), SequenceAllocator()).spans
    from_json = to_spans(parse_json(_to_otlp_json(request)), SequenceAllocator()).spans
    assert from_pb == from_json
    assert [s.sequence_id for s in from_pb] == [7, 7]


def test_span_attributes_override_resource_ids() -> None:
    span = otlp_span("x", {"agentlightning.rollout_id": "ro-span", "agentlightning.span_sequence_id": "12"})
    out = to_spans(export_request([span], attempt_resource("ro-res", "at-res")), SequenceAllocator())
    [got] = out.spans
    assert (got.rollout_id, got.attempt_id, got.sequence_id) == ("ro-span", "at-res", 12)


def test_spans_without_ids_are_rejected_with_reasons() -> None:
    good = otlp_span("good")
    no_attempt = otlp_span("no-attempt", {"agentlightning.rollout_id": "ro-x"})
    request = export_request([good], attempt_resource("ro-1", "at-1"))
    bare = request.resource_spans.add()
    bare.scope_spans.add().spans.extend([otlp_span("orphan"), no_attempt])
    bad_seq = otlp_span("bad-seq", {"agentlightning.span_sequence_id": -3})
    request.resource_spans[0].scope_spans[0].spans.append(bad_seq)
    out = to_spans(request, SequenceAllocator())
    assert [s.name for s in out.spans] == ["good"]
    codes = {r.name: r.code for r in out.rejected}
    assert codes == {"orphan": "missing_rollout_id", "no-attempt": "missing_attempt_id", "bad-seq": "invalid_sequence_id"}
    assert all("agentlightning" in r.reason for r in out.rejected)


def test_malformed_span_ids_are_rejected() -> None:
    spans = [otlp_span("zero-trace", trace_id=bytes(16)), otlp_span("short-span", span_id=b"\x01" * 4)]
    out = to_spans(export_request(spans, attempt_resource("ro", "at")), SequenceAllocator())
    assert out.spans == [] and [r.code for r in out.rejected] == ["invalid_trace_id", "invalid_span_id"]


# Upstream's rules (agentlightning 0.3.0, recorded end to end in test_upstream_sequence_ids.py): spans
# without an id are numbered in body order, not by start time (exporters send children before their
# parents, and upstream numbers what it receives in that order), per rollout from 1.


def test_unnumbered_spans_follow_body_order_and_stay_above_earlier_supplied_ids() -> None:
    allocator = SequenceAllocator()
    allocator.observe("ro", "at", 10)
    late = otlp_span("late", start_ns=3_000)
    early = otlp_span("early", start_ns=1_000)
    out = to_spans(export_request([late, early], attempt_resource("ro", "at")), allocator)
    assert [(s.name, s.sequence_id) for s in out.spans] == [("late", 11), ("early", 12)]


def test_ids_are_issued_before_the_same_requests_supplied_ids_count() -> None:
    numbered = otlp_span("numbered", {"agentlightning.span_sequence_id": 5})
    bare = otlp_span("bare")
    allocator = SequenceAllocator()
    out = to_spans(export_request([numbered, bare], attempt_resource("ro", "at")), allocator)
    assert [(s.name, s.sequence_id) for s in out.spans] == [("numbered", 5), ("bare", 1)]
    [after] = to_spans(export_request([otlp_span("next")], attempt_resource("ro", "at")), allocator).spans
    assert after.sequence_id == 6  # the supplied 5 moved the counter once the request was taken


def test_a_retried_attempt_continues_its_rollouts_numbers() -> None:
    allocator = SequenceAllocator()
    first = to_spans(export_request([otlp_span("a"), otlp_span("b")], attempt_resource("ro", "at-1")), allocator)
    retry = to_spans(export_request([otlp_span("c")], attempt_resource("ro", "at-2")), allocator)
    other = to_spans(export_request([otlp_span("d")], attempt_resource("ro-other", "at-3")), allocator)
    assert [s.sequence_id for s in first.spans + retry.spans + other.spans] == [1, 2, 3, 1]


@pytest.mark.parametrize(
    "body",
    [b"\xff\xff\xff", b"\x0a\x05\x01", bytes(range(256)), b"plain text is not protobuf"],
)
def test_garbage_protobuf_is_refused(body: bytes) -> None:
    with pytest.raises(OtlpDecodeError, match="protobuf"):
        parse_protobuf(body)


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "expected an object"),
        (b'{"resourceSpans": 5}', "ExportTraceServiceRequest"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "not hex"),
        (b"\xff\xfe", "invalid JSON"),
    ],
)
def test_invalid_json_is_refused_with_reason(body: bytes, reason: str) -> None:
    with pytest.raises(OtlpDecodeError, match=reason):
        parse_json(body)


def test_non_finite_floats_survive_as_text() -> None:
    span = otlp_span("f", {"a": float("inf"), "b": [1.0, float("nan")]})
    [got] = to_spans(export_request([span], attempt_resource("ro", "at")), SequenceAllocator()).spans
    assert decode(encode(got), Span).attributes == {"a": "inf", "b": [1.0, "nan"], "otel.scope.name": "tests"}


def test_unknown_json_fields_are_ignored() -> None:
    request = export_request([otlp_span("a")], attempt_resource("ro", "at"))
    doc = json.loads(_to_otlp_json(request))
    doc["futureField"] = {"x": 1}
    out = to_spans(parse_json(json.dumps(doc).encode()), SequenceAllocator())
    assert [s.name for s in out.spans] == ["a"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_either_parse_or_raise_decode_error(body: bytes) -> None:
    try:
        request = parse_protobuf(body)
    except OtlpDecodeError:
        return
    out = to_spans(request, SequenceAllocator())  # whatever parsed must convert without crashing
    assert all(isinstance(s, Span) for s in out.spans)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=256) | st.text(max_size=256).map(str.encode))
def test_arbitrary_json_bodies_either_parse_or_raise_decode_error(body: bytes) -> None:
    try:
        request = parse_json(body)
    except OtlpDecodeError:
        return
    to_spans(request, SequenceAllocator())


attribute_values = st.one_of(
    st.text(max_size=20),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(min_value=0, max_value=2**31), max_size=10),
    st.lists(st.text(max_size=5), max_size=5),
)


@settings(max_examples=100, deadline=None)
@given(
    attrs=st.dictionaries(st.text(min_size=1, max_size=15).filter(lambda k: not k.startswith("agentlightning")), attribute_values, max_size=8),
    rollout_id=st.text(min_size=1, max_size=20).filter(str.strip),
    sequence=st.integers(min_value=0, max_value=2**62),
)
def test_attributes_and_ids_round_trip_through_both_encodings(attrs: dict, rollout_id: str, sequence: int) -> None:
    span = otlp_span("s", {**attrs, "agentlightning.span_sequence_id": sequence})
    request = export_request([span], attempt_resource(rollout_id, "at-1"))
    for parsed in (parse_protobuf(request.SerializeToString()), parse_json(_to_otlp_json(request))):
        [got] = to_spans(parsed, SequenceAllocator()).spans
        assert got.rollout_id == rollout_id and got.sequence_id == sequence
        for key, value in attrs.items():
            assert got.attributes[key] == value
        assert decode(encode(got), Span) == got
