"""Emitters produce upstream's span names and attributes in the active attempt."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest
from opentelemetry import trace as otel_trace

from agl_stream.emitter import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_rewards_from_span,
    operation,
)
from agl_stream.semconv import AGL_ANNOTATION, AGL_EXCEPTION, AGL_MESSAGE, AGL_OBJECT, AGL_OPERATION
from agl_stream.types import Span, SpanCoreFields
from tests.agl_stream.tracer.fakes import ListSink, list_tracer


@pytest.fixture
def traced() -> Iterator[tuple[object, ListSink]]:
    tracer, sink = list_tracer()
    yield tracer, sink
    tracer.teardown()


def _spans(tracer: object, sink: ListSink) -> list[Span]:
    tracer.pipeline.flush(timeout=10)  # type: ignore[attr-defined]
    return sorted(sink.spans, key=lambda s: s.sequence_id)


def test_emit_without_active_tracer_raises_unless_not_propagated() -> None:
    with pytest.raises(RuntimeError, match="No active tracer found"):
        emit_reward(1.0)
    with pytest.raises(RuntimeError, match="No active tracer found"):
        emit_message("hi")
    core = emit_reward(0.5, propagate=False)
    assert isinstance(core, SpanCoreFields)
    assert core.attributes == {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.5}


def test_scalar_and_multi_dimensional_rewards(traced: tuple[object, ListSink]) -> None:
    tracer, sink = traced
    with tracer.attempt_scope(rollout_id="ro-1", attempt_id="at-1"):  # type: ignore[attr-defined]
        emit_reward(0.25)
        emit_reward({"task": 1.0, "format": 0.5, "length": -0.1}, primary_key="task")
    first, second = _spans(tracer, sink)
    assert first.name == AGL_ANNOTATION and first.rollout_id == "ro-1" and first.attempt_id == "at-1"
    assert [r.model_dump() for r in get_rewards_from_span(second)] == [
        {"name": "task", "value": 1.0},
        {"name": "format", "value": 0.5},
        {"name": "length", "value": -0.1},
    ]
    assert second.attributes["agentlightning.reward.1.name"] == "format"
    assert [s.sequence_id for s in (first, second)] == [1, 2]
    assert find_final_reward([second, first]) == 1.0  # sequence order, not list order
    assert len(find_reward_spans([first, second])) == 2


def test_reward_validation() -> None:
    with pytest.raises(ValueError, match="primary_key"):
        emit_reward({"a": 1.0, "b": 2.0}, propagate=False)
    with pytest.raises(TypeError):
        emit_reward("high", propagate=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        emit_reward(True, propagate=False)


def test_message_object_annotation_exception(traced: tuple[object, ListSink]) -> None:
    tracer, sink = traced
    with tracer.attempt_scope(rollout_id="ro-2", attempt_id="at-2"):  # type: ignore[attr-defined]
        emit_message("thinking", attributes={"step": {"index": 3}})
        emit_object({"answer": 42})
        emit_object(7)
        emit_annotation({"agentlightning.tag": ["a", "b"], "meta": {"source": "unit"}})
        try:
            raise KeyError("missing")
        except KeyError as exc:
            emit_exception(exc)
    message, obj, literal, annotation, exception = _spans(tracer, sink)
    assert message.name == AGL_MESSAGE and message.attributes["agentlightning.message.body"] == "thinking"
    assert message.attributes["step.index"] == 3
    assert obj.name == AGL_OBJECT and obj.attributes["agentlightning.object.type"] == "dict"
    assert obj.attributes["agentlightning.object.json"] == '{"answer": 42}'
    assert literal.attributes["agentlightning.object.literal"] == 7
    assert annotation.attributes["agentlightning.tag"] == ["a", "b"] and annotation.attributes["meta.source"] == "unit"
    assert exception.name == AGL_EXCEPTION and exception.status.status_code == "ERROR"
    assert exception.attributes["exception.type"] == "KeyError"
    assert "raise KeyError" in exception.attributes["exception.stacktrace"]


def test_operation_decorator_context_manager_and_nesting(traced: tuple[object, ListSink]) -> None:
    tracer, sink = traced

    @operation
    def add(a: int, b: int = 1) -> dict[str, int]:
        emit_message("inside")
        return {"sum": a + b}

    @operation(name="search", category="tool")
    async def search(query: str) -> str:
        return query.upper()

    @operation
    def broken() -> None:
        raise ValueError("bad tool")

    with tracer.attempt_scope(rollout_id="ro-3", attempt_id="at-3"):  # type: ignore[attr-defined]
        assert add(2, b=3) == {"sum": 5}
        assert asyncio.run(search("q")) == "Q"
        with operation(tool_name="calc") as op:
            op.set_input(expr="1+1")
            op.set_output(2)
        with pytest.raises(ValueError):
            broken()
    spans = _spans(tracer, sink)
    by_name = {s.attributes.get("agentlightning.operation.name", s.name): s for s in spans}
    inner, outer = by_name[AGL_MESSAGE], by_name["add"]
    assert inner.parent_id == outer.span_id and inner.sequence_id < outer.sequence_id
    assert outer.name == AGL_OPERATION
    assert outer.attributes["agentlightning.operation.input.a"] == 2
    assert outer.attributes["agentlightning.operation.input.b"] == 3
    assert outer.attributes["agentlightning.operation.output.sum"] == 5
    assert by_name["search"].attributes["category"] == "tool"
    assert by_name["search"].attributes["agentlightning.operation.output"] == "Q"
    manual = next(s for s in spans if s.attributes.get("tool_name") == "calc")
    assert manual.attributes["agentlightning.operation.input.expr"] == "1+1"
    assert manual.attributes["agentlightning.operation.output"] == 2
    assert by_name["broken"].status.status_code == "ERROR"


def test_operation_without_tracer_raises_and_propagate_false_runs() -> None:
    @operation
    def f() -> int:
        return 1

    with pytest.raises(RuntimeError, match="No active tracer"):
        f()

    @operation(propagate=False)
    def g() -> int:
        return 2

    assert g() == 2


def test_plain_opentelemetry_spans_are_attributed(traced: tuple[object, ListSink]) -> None:
    tracer, sink = traced
    otel = otel_trace.get_tracer("some.library")
    with tracer.attempt_scope(rollout_id="ro-4", attempt_id="at-4"):  # type: ignore[attr-defined]
        with otel.start_as_current_span("openai.chat.completion", attributes={"gen_ai.system": "openai"}):
            pass
    with otel.start_as_current_span("outside"):  # no attempt active: not exported
        pass
    (span,) = _spans(tracer, sink)
    assert span.name == "openai.chat.completion" and span.rollout_id == "ro-4"
    assert span.resource.attributes["agentlightning.rollout_id"] == "ro-4"
    assert span.resource.attributes["agentlightning.span_sequence_id"] == 1
