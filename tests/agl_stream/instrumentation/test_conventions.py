"""OpenInference's spans of real OpenAI and LangGraph calls, mapped onto upstream's conventions at capture.

The calls go to a scripted server that answers like vLLM with ``return_token_ids`` (streamed and
not); the instrumentations are the maintained ones agl-stream's tracer activates.
"""

from __future__ import annotations

from typing import Any, Iterator, TypedDict

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agl_stream import semconv
from agl_stream.instrumentation.conventions import SOURCE_NAME, normalize
from agl_stream.instrumentation.openai import _prepare
from tests.agl_stream.scripted_vllm import ScriptedVllm, prompt_text, token_ids

pytest.importorskip("openinference.instrumentation.openai")
pytest.importorskip("openinference.instrumentation.langchain")

ANSWER = "the answer is four"


class Detachable(SimpleSpanProcessor):
    """An exporting processor that stops exporting when the test is done (a provider cannot drop processors)."""

    attached = True

    def on_end(self, span: ReadableSpan) -> None:
        if self.attached:
            super().on_end(span)


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[InMemorySpanExporter, ScriptedVllm]]:
    """The process-wide provider and instrumentations exactly as a runner's tracer sets them up (instrumentors
    are process singletons), plus an in-memory exporter for this module."""
    from agl_stream.instrumentation import instrument_installed
    from agl_stream.tracer.otel import install_global_processor

    provider = install_global_processor()
    assert {"openai", "langchain"} <= set(instrument_installed(provider))
    exporter = InMemorySpanExporter()
    processor = Detachable(exporter)
    provider.add_span_processor(processor)
    try:
        with ScriptedVllm(lambda body: ANSWER) as server:
            yield exporter, server
    finally:
        processor.attached = False


def mapped(span: ReadableSpan) -> tuple[str, dict[str, Any]]:
    return normalize(span.name, {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()})


def chat(server: ScriptedVllm, **kwargs: Any) -> Any:
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url, api_key="unused")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is two plus two"}]
    return client.chat.completions.create(model="policy", messages=messages, max_tokens=8, **kwargs)  # token ids: asked by the patch


def test_request_side_asks_for_token_ids_streamed_or_not() -> None:
    assert _prepare({"model": "m"}) == {"model": "m", "extra_body": {"return_token_ids": True}, "logprobs": True}
    assert _prepare({"stream": True, "extra_body": {"x": 1}})["extra_body"] == {"x": 1, "return_token_ids": True}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_call_becomes_an_upstream_llm_span_with_token_ids(traced: Any, stream: bool) -> None:
    exporter, server = traced
    exporter.clear()
    reply = chat(server, stream=stream)
    text = "".join((c.choices[0].delta.content or "") for c in reply if c.choices) if stream else reply.choices[0].message.content
    assert text == ANSWER
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "ChatCompletion"]
    name, attrs = mapped(span)
    assert name == semconv.LLM_CALL_SPAN_NAME and attrs[SOURCE_NAME] == "ChatCompletion"
    prompt = prompt_text(server.requests[-1])
    assert attrs[semconv.PROMPT_TOKEN_IDS] == token_ids(prompt) and attrs[semconv.RESPONSE_TOKEN_IDS] == token_ids(ANSWER)
    assert attrs["gen_ai.prompt.1.role"] == "user" and attrs["gen_ai.prompt.1.content"] == "what is two plus two"
    assert attrs["gen_ai.completion.0.content"] == ANSWER and attrs["gen_ai.request.streaming"] is stream
    assert attrs[semconv.GEN_AI_RESPONSE_ID].startswith("chatcmpl-") and attrs["gen_ai.request.max_tokens"] == 8
    assert attrs["openinference.span.kind"] == "LLM"  # the instrumentation's own attributes stay


def test_langgraph_nodes_are_agents_and_their_calls_carry_token_ids(traced: Any) -> None:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    exporter, server = traced
    exporter.clear()

    class State(TypedDict):
        question: str
        answer: str

    llm = ChatOpenAI(base_url=server.base_url, api_key="unused", model="policy")
    graph = StateGraph(State)
    graph.add_node("planner", lambda s: {"answer": llm.invoke(s["question"]).content})
    graph.add_node("writer", lambda s: {"answer": llm.invoke(s["answer"]).content})
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "writer")
    graph.add_edge("writer", END)
    graph.compile().invoke({"question": "plan it"})

    spans = {s.context.span_id: mapped(s) for s in exporter.get_finished_spans()}
    agents = sorted(attrs["agent.name"] for _, attrs in spans.values() if "agent.name" in attrs)
    assert agents == ["planner", "writer"]
    calls = [attrs for name, attrs in spans.values() if name == semconv.LLM_CALL_SPAN_NAME]
    assert len(calls) == 2 and all(c[semconv.RESPONSE_TOKEN_IDS] == token_ids(ANSWER) for c in calls)
    # LangChain's own LLM span and the graph's other spans keep their names
    assert {name for name, _ in spans.values()} >= {"ChatOpenAI", "LangGraph", "planner", "writer"}


def test_spans_without_openinference_attributes_pass_untouched() -> None:
    attrs = {"gen_ai.agent.name": "x"}
    assert normalize("invoke_agent x", attrs) == ("invoke_agent x", attrs)
    # an OpenAI call that failed has no chat completion to map
    failed = {"openinference.span.kind": "LLM", "output.value": "boom"}
    assert normalize("ChatCompletion", failed) == ("ChatCompletion", failed)
    assert normalize("triage", {"openinference.span.kind": "AGENT"})[1]["agent.name"] == "triage"
    # an agent span with an OpenInference graph node (CrewAI's task span, named after the task) is that agent
    crewai_task = {"openinference.span.kind": "AGENT", "graph.node.id": "calculator"}
    assert normalize("calculator.compute._execute_core", crewai_task)[1]["agent.name"] == "calculator"


def test_tool_turns_keep_what_trace_to_messages_needs(traced: Any) -> None:
    """A tool-calling conversation keeps upstream's layout: the assistant's calls, the tool result's
    ``tool_call_id`` and the tool definitions, so TraceToMessages rebuilds the same messages."""
    from openai import OpenAI

    from agl_stream.adapter import TraceToMessages
    from agl_stream.types import Span

    exporter, server = traced
    exporter.clear()
    tools = [{"type": "function", "function": {"name": "lookup", "description": "find rooms",
                                               "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip
    messages = [
        {"role": "user", "content": "a room for 4"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"rooms": ["Cedar"]}'},
    ]  # fmt: skip
    OpenAI(base_url=server.base_url, api_key="unused").chat.completions.create(model="policy", messages=messages, tools=tools)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "ChatCompletion"]
    name, attrs = mapped(span)
    assert attrs["gen_ai.prompt.2.tool_call_id"] == "call_1" and attrs["gen_ai.prompt.1.tool_calls.0.name"] == "lookup"
    assert attrs["gen_ai.request.functions.0.name"] == "lookup"
    (sample,) = TraceToMessages().adapt([Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=1,
                                              trace_id="a" * 32, span_id="b" * 16, name=name, attributes=attrs,
                                              start_time=1.0, end_time=2.0)])  # fmt: skip
    assert sample["messages"][1]["tool_calls"][0]["id"] == "call_1"
    assert sample["messages"][2] == {"role": "tool", "content": '{"rooms": ["Cedar"]}', "tool_call_id": "call_1"}
    assert sample["tools"][0]["function"]["name"] == "lookup"
