"""The export pipeline: ordering, overflow policies, flush markers, span sizing, OTLP conversion."""

from __future__ import annotations

import threading

import pytest
from opentelemetry import trace as otel_trace

from agl_stream.emitter import emit_message, emit_reward
from agl_stream.serialization import decode
from agl_stream.tracer import OtelTracer, SpanExportPipeline
from agl_stream.tracer.otlp import span_to_readable
from agl_stream.tracer.convert import readable_to_span
from agl_stream.tracer.sizing import TRUNCATED_ATTRIBUTE, fit_span
from agl_stream.types import Event, Span, SpanCoreFields
from tests.agl_stream.tracer.fakes import ListSink, list_tracer


def _gated_tracer(**options: object) -> tuple[OtelTracer, ListSink, threading.Event]:
    gate = threading.Event()
    sink = ListSink(gate)
    tracer = OtelTracer(SpanExportPipeline(lambda: sink, batch_size=1, **options))  # type: ignore[arg-type]
    tracer.init()
    return tracer, sink, gate


def test_drop_policy_counts_dropped_spans_per_attempt() -> None:
    tracer, sink, gate = _gated_tracer(max_buffered=3, overflow="drop")
    try:
        with tracer.attempt_scope(rollout_id="ro-d", attempt_id="at-d") as state:
            for i in range(10):
                emit_message(f"m{i}")
        assert tracer.pipeline.spans_dropped > 0
        assert state.dropped == tracer.pipeline.spans_dropped
        assert state.submitted + state.dropped == 10
        gate.set()
        tracer.pipeline.flush(timeout=10)
        assert len(sink.spans) == state.submitted
    finally:
        gate.set()
        tracer.teardown()


def test_block_policy_waits_for_room_and_loses_nothing() -> None:
    tracer, sink, gate = _gated_tracer(max_buffered=2, overflow="block", block_timeout=30)
    try:
        releaser = threading.Timer(0.3, gate.set)
        releaser.start()
        with tracer.attempt_scope(rollout_id="ro-b", attempt_id="at-b") as state:
            for i in range(20):
                emit_message(f"m{i}")
        tracer.pipeline.flush(timeout=10)
        assert tracer.pipeline.spans_dropped == 0 and state.dropped == 0
        assert [s.sequence_id for s in sink.spans] == list(range(1, 21))
    finally:
        gate.set()
        tracer.teardown()


def test_block_policy_drops_after_timeout() -> None:
    tracer, sink, gate = _gated_tracer(max_buffered=1, overflow="block", block_timeout=0.05)
    try:
        with tracer.attempt_scope(rollout_id="ro-t", attempt_id="at-t") as state:
            for i in range(5):
                emit_message(f"m{i}")
        assert state.dropped > 0
    finally:
        gate.set()
        tracer.teardown()


def test_spans_from_threads_without_context_follow_their_parent() -> None:
    tracer, sink = list_tracer()
    otel = otel_trace.get_tracer("threads")
    try:
        with tracer.attempt_scope(rollout_id="ro-p", attempt_id="at-p"):
            with otel.start_as_current_span("parent") as parent:
                ctx = otel_trace.set_span_in_context(parent)

                def work() -> None:  # a raw thread: contextvars are not copied
                    otel.start_span("child", context=ctx).end()

                thread = threading.Thread(target=work)
                thread.start()
                thread.join()
        tracer.pipeline.flush(timeout=10)
        names = {s.name: s for s in sink.spans}
        assert names["child"].rollout_id == "ro-p" and names["child"].parent_id == names["parent"].span_id
    finally:
        tracer.teardown()


def test_returned_spans_are_rewritten_into_the_attempt() -> None:
    tracer, sink = list_tracer()
    try:
        foreign = Span(rollout_id="other", attempt_id="other", sequence_id=99, trace_id="a" * 32, span_id="b" * 16, name="x")
        with tracer.attempt_scope(rollout_id="ro-r", attempt_id="at-r") as state:
            tracer.add_spans([foreign, emit_reward(0.7, propagate=False)])
            with pytest.raises(TypeError):
                tracer.add_spans(["not a span"])
        tracer.pipeline.flush(timeout=10)
        assert {(s.rollout_id, s.attempt_id) for s in sink.spans} == {("ro-r", "at-r")}
        assert sorted(s.sequence_id for s in sink.spans) == [1, 2]
        assert state.last_reward == 0.7
    finally:
        tracer.teardown()


def _big_span(**attributes: object) -> Span:
    return Span(rollout_id="ro", attempt_id="at", sequence_id=1, trace_id="a" * 32, span_id="b" * 16, name="big",
                attributes=dict(attributes), events=[Event(name="e", attributes={"blob": "z" * 50_000})])  # fmt: skip


def test_fit_span_leaves_small_spans_alone() -> None:
    span = _big_span(small="ok")
    payload, truncated = fit_span(span, 1_000_000)
    assert not truncated and decode(payload, Span) == span


def test_fit_span_truncates_largest_values_with_explicit_marker() -> None:
    span = _big_span(prompt="p" * 300_000, response_token_ids=list(range(100_000)), keep="small")
    payload, truncated = fit_span(span, 100_000)
    assert truncated and len(payload) <= 100_000
    out = decode(payload, Span)
    assert out.attributes["keep"] == "small"
    assert "truncated" in out.attributes["prompt"]
    assert set(out.attributes[TRUNCATED_ATTRIBUTE]) >= {"prompt", "response_token_ids"}
    assert len(out.attributes["response_token_ids"]) < 100_000


def test_otlp_conversion_round_trip_keeps_ids_and_attributes() -> None:
    tracer, sink = list_tracer()
    otel = otel_trace.get_tracer("rt")
    try:
        with tracer.attempt_scope(rollout_id="ro-o", attempt_id="at-o"):
            with otel.start_as_current_span("llm", attributes={"prompt_token_ids": [1, 2, 3], "gen_ai.system": "x"}):
                emit_reward(1.0)
        tracer.pipeline.flush(timeout=10)
        for span in sink.spans:
            readable = span_to_readable(span)
            assert readable.resource.attributes["agentlightning.rollout_id"] == "ro-o"
            assert readable.attributes["agentlightning.span_sequence_id"] == span.sequence_id
            back = readable_to_span(readable, rollout_id="ro-o", attempt_id="at-o", sequence_id=span.sequence_id)
            assert (back.span_id, back.parent_id, back.name) == (span.span_id, span.parent_id, span.name)
            assert {k: back.attributes[k] for k in span.attributes} == span.attributes
    finally:
        tracer.teardown()


def test_pipeline_rejects_unknown_overflow_policy() -> None:
    with pytest.raises(ValueError):
        SpanExportPipeline(lambda: ListSink(), overflow="spill")  # type: ignore[arg-type]
    assert SpanCoreFields(name="x").attributes == {}


def test_fast_document_path_matches_the_model_encoding() -> None:
    """The exporter serializes dicts directly; they must decode to exactly the model path's Span."""
    from agl_stream.serialization import encode
    from agl_stream.tracer.convert import encode_doc, readable_to_doc

    tracer, sink = list_tracer()
    otel = otel_trace.get_tracer("docs")
    try:
        with tracer.attempt_scope(rollout_id="ro-f", attempt_id="at-f") as state:
            with otel.start_as_current_span("outer", attributes={"ids": [1, 2], "nan": float("nan")}) as outer:
                outer.add_event("evt", {"k": "v"})
                emit_reward(2.0)
        tracer.pipeline.flush(timeout=10)
        readable = next(s for s in state.spans if getattr(s, "name", "") == "outer")
        doc = readable_to_doc(readable, rollout_id="ro-f", attempt_id="at-f", sequence_id=2)
        model = readable_to_span(readable, rollout_id="ro-f", attempt_id="at-f", sequence_id=2)
        fast = decode(encode_doc(doc), Span)
        assert fast == decode(encode(model), Span)
        assert fast.attributes["nan"] is None and fast.attributes["ids"] == [1, 2]  # NaN is not JSON: null, as the model does
        assert fast.events[0].attributes == {"k": "v"} and fast.sequence_id == 2
        reward = next(s for s in sink.spans if s.name == "agentlightning.annotation")
        assert reward.parent_id == format(readable.context.span_id, "016x")
    finally:
        tracer.teardown()
