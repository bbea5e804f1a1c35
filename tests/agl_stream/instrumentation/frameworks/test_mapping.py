"""The pure parts of the framework integrations: activation on import, the Anthropic and litellm span mappings,
the Anthropic stream accumulator keeping token ids, AutoGen's and the Agents SDK's tool spans around MCP calls.
The framework tests on the local stack cover the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agl_stream import semconv
from agl_stream.instrumentation.conventions import LITELLM_REQUEST, LITELLM_RESPONSE, SOURCE_NAME, normalize
from tests.agl_stream.instrumentation.frameworks.servers import LITELLM_OFFLINE, ToolVllm

REPO = Path(__file__).resolve().parents[4]


def test_each_framework_is_instrumented_when_the_agent_imports_it() -> None:
    pytest.importorskip("litellm")
    pytest.importorskip("anthropic")
    pytest.importorskip("agents")
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from agl_stream.instrumentation import active, instrument_installed\n"
        "armed = instrument_installed(TracerProvider())\n"
        "print('armed:' + ','.join(armed))\n"
        "print('imported:' + ','.join(m for m in ('litellm', 'anthropic', 'agents') if m in sys.modules))\n"
        "import anthropic\n"
        "print('after_anthropic:' + ','.join(active()))\n"
        "import litellm, agents\n"
        "print('after_all:' + ','.join(active()))\n"
    )
    env = {**os.environ, **{name: "True" for name in LITELLM_OFFLINE}}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    lines = dict(line.split(":", 1) for line in out.stdout.split())
    assert {"litellm", "anthropic", "openai_agents"} <= set(lines["armed"].split(",")), out.stdout
    assert lines["imported"] == "", out.stdout
    assert lines["after_anthropic"] == "anthropic", out.stdout + out.stderr
    after_all = set(lines["after_all"].split(","))
    assert {"anthropic", "litellm", "openai", "openai_agents"} <= after_all, out.stdout + out.stderr


def anthropic_span(request: dict[str, Any], message: dict[str, Any],
                   name: str = "messages.create") -> tuple[str, dict[str, Any]]:  # fmt: skip
    attributes = {"openinference.span.kind": "LLM", "llm.system": "anthropic", "input.value": json.dumps(request),
                  "output.value": json.dumps(message)}  # fmt: skip
    return normalize(name, attributes)


REQUEST = {
    "model": "policy", "max_tokens": 64, "temperature": 0.5, "system": [{"type": "text", "text": "Use the tools."}],
    "tools": [{"name": "multiply", "description": "Multiply.", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "what is 6 times 7"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me multiply."},
                                          {"type": "tool_use", "id": "tu_1", "name": "multiply", "input": {"a": 6, "b": 7}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": [{"type": "text", "text": "42"}]},
                                     {"type": "text", "text": "and now?"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
    ],
}  # fmt: skip
MESSAGE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "policy", "stop_reason": "end_turn",
    "content": [{"type": "text", "text": "the product"}, {"type": "text", "text": " is 42"}],
    "usage": {"input_tokens": 10, "cache_read_input_tokens": 2, "output_tokens": 3},
    "prompt_token_ids": [1, 2, 3], "token_ids": [7, 8, 9],
}  # fmt: skip


def test_an_anthropic_call_maps_onto_the_openai_layout_with_its_token_ids() -> None:
    name, attrs = anthropic_span(REQUEST, MESSAGE)
    assert name == semconv.LLM_CALL_SPAN_NAME and attrs[SOURCE_NAME] == "messages.create"
    assert attrs[semconv.GEN_AI_SYSTEM] == "anthropic" and attrs[semconv.GEN_AI_REQUEST_MODEL] == "policy"
    assert attrs["gen_ai.request.temperature"] == 0.5 and attrs["gen_ai.request.streaming"] is False
    roles = [attrs[f"gen_ai.prompt.{i}.role"] for i in range(5)]
    assert roles == ["system", "user", "assistant", "tool", "user"]  # a tool result answers before the turn's text
    assert attrs["gen_ai.prompt.0.content"] == "Use the tools."
    assert attrs["gen_ai.prompt.2.content"] == "Let me multiply."
    assert attrs["gen_ai.prompt.2.tool_calls.0.name"] == "multiply"
    assert attrs["gen_ai.prompt.2.tool_calls.0.id"] == "tu_1"
    assert json.loads(attrs["gen_ai.prompt.2.tool_calls.0.arguments"]) == {"a": 6, "b": 7}
    assert attrs["gen_ai.prompt.3.tool_call_id"] == "tu_1" and attrs["gen_ai.prompt.3.content"] == "42"
    parts = json.loads(attrs["gen_ai.prompt.4.content"])
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert parts == [{"type": "text", "text": "and now?"}, image]
    assert attrs["gen_ai.request.functions.0.name"] == "multiply"
    assert attrs["gen_ai.completion.0.content"] == "the product is 42"
    assert attrs["gen_ai.completion.0.finish_reason"] == "stop"
    assert attrs[semconv.PROMPT_TOKEN_IDS] == [1, 2, 3] and attrs[semconv.RESPONSE_TOKEN_IDS] == [7, 8, 9]
    assert attrs[semconv.GEN_AI_USAGE_PROMPT_TOKENS] == 12 and attrs[semconv.GEN_AI_USAGE_COMPLETION_TOKENS] == 3
    assert attrs[semconv.GEN_AI_RESPONSE_ID] == "msg_1"


def test_an_anthropic_tool_use_without_token_ids_and_a_failed_call() -> None:
    message = {**MESSAGE, "stop_reason": "tool_use", "content": [{"type": "tool_use", "id": "tu_2", "name": "multiply",
                                                                  "input": {"a": 1, "b": 2}}]}  # fmt: skip
    del message["prompt_token_ids"], message["token_ids"]
    request = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    name, attrs = anthropic_span(request, message, "messages.stream")
    assert name == semconv.LLM_CALL_SPAN_NAME and attrs["gen_ai.request.streaming"] is True  # the stream helper
    assert attrs["gen_ai.completion.0.finish_reason"] == "tool_calls"
    (call,) = json.loads(attrs["gen_ai.completion.0.tool_calls"])
    assert call["function"] == {"name": "multiply", "arguments": '{"a": 1, "b": 2}'}
    assert semconv.PROMPT_TOKEN_IDS not in attrs and semconv.RESPONSE_TOKEN_IDS not in attrs  # none sent: none made up
    failed = {"openinference.span.kind": "LLM", "llm.system": "anthropic", "input.value": "{}"}
    assert normalize("messages.create", failed) == ("messages.create", failed)  # no message: left as it is


def test_a_litellm_span_is_an_llm_call_only_when_it_recorded_the_call() -> None:
    plain = {"openinference.span.kind": "LLM", "llm.provider": "openai", "output.value": "the answer"}
    assert normalize("completion", plain) == ("completion", plain)  # its call is the OpenAI span below it
    response = {"id": "chatcmpl-1", "model": "policy", "prompt_token_ids": [4, 5],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop",
                             "provider_specific_fields": {"token_ids": [6]}}]}  # fmt: skip
    recorded = {**plain, "llm.provider": "hosted_vllm", LITELLM_RESPONSE: json.dumps(response),
                LITELLM_REQUEST: json.dumps({"model": "hosted_vllm/policy", "messages": [{"role": "user", "content": "yo"}],
                                             "stream": True})}  # fmt: skip
    name, attrs = normalize("acompletion", recorded)
    assert name == semconv.LLM_CALL_SPAN_NAME and attrs[SOURCE_NAME] == "acompletion"
    assert attrs[semconv.GEN_AI_SYSTEM] == "hosted_vllm" and attrs["gen_ai.request.streaming"] is True
    assert attrs[semconv.PROMPT_TOKEN_IDS] == [4, 5] and attrs[semconv.RESPONSE_TOKEN_IDS] == [6]


def test_the_anthropic_stream_accumulator_keeps_the_deltas_token_ids() -> None:
    pytest.importorskip("anthropic")
    from anthropic.lib.streaming._messages import accumulate_event

    from agl_stream.instrumentation.anthropic import _keeping_token_ids

    accumulate = _keeping_token_ids(getattr(accumulate_event, "_agl_original", accumulate_event))  # the SDK's own
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "policy",
                                              "content": [], "usage": {"input_tokens": 3, "output_tokens": 0},
                                              "prompt_token_ids": [1, 2, 3]}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "the"}, "token_ids": [7]},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " end"}, "token_ids": [8, 9]},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
    ]  # fmt: skip
    snapshot = None
    for event in events:
        snapshot = accumulate(event=event, current_snapshot=snapshot, json_bufs={})
    dumped = json.loads(snapshot.model_dump_json())
    assert dumped["content"][0]["text"] == "the end"
    assert dumped["prompt_token_ids"] == [1, 2, 3] and dumped["token_ids"] == [7, 8, 9]


def autogen_spans() -> tuple[Any, Any, Any]:
    """A provider with the AutoGen span processor, and tracers standing for OpenInference's AutoGen instrumentation
    (its own tracer wrapper, which sets a span's kind again when it ends) and for AutoGen's and MCP's spans."""
    from openinference.instrumentation import OITracer, TraceConfig
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agl_stream.instrumentation.autogen import AUTOGEN_SCOPE, MCP_SCOPE, AutoGenSpans

    provider, exporter, processor = TracerProvider(), InMemorySpanExporter(), AutoGenSpans()
    processor.active = True
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    autogen = OITracer(provider.get_tracer(AUTOGEN_SCOPE), config=TraceConfig())
    return exporter, autogen, (provider.get_tracer("autogen-core"), provider.get_tracer(MCP_SCOPE))


def test_agent_spans_are_named_after_their_agent() -> None:
    """AutoGen's and CrewAI's AGENT spans: OpenInference's graph node where it set one, else the span name (less
    AutoGen's turn suffix), at capture like every framework's."""
    agent = {"openinference.span.kind": "AGENT"}
    cases = [("solver.on_messages_stream", {**agent, "graph.node.id": "solver"}, "solver"),  # an AssistantAgent
             ("user_proxy.on_messages_stream", agent, "user_proxy"),  # another AutoGen agent: no graph node
             ("calculator.compute._execute_core", {**agent, "graph.node.id": "calculator"}, "calculator"),  # CrewAI
             ("triage", agent, "triage"),  # the Agents SDK's
             ("triage", {**agent, "agent.name": "set"}, "set")]  # fmt: skip
    for name, attributes, expected in cases:
        assert normalize(name, attributes)[1]["agent.name"] == expected, name


def test_an_autogen_tool_call_is_one_tool_span() -> None:
    """An MCP tool call inside AutoGen's tool span is the record (AutoGen's becomes CHAIN, however many spans lie
    between, though OpenInference sets the kind again at the end); other tools and MCP calls outside keep theirs."""
    pytest.importorskip("openinference.instrumentation")
    from agl_stream.instrumentation.autogen import RECORDED_BY
    from agl_stream.instrumentation.mcp import tool_call_attributes

    exporter, autogen, (core, mcp) = autogen_spans()
    tool = {"openinference.span.kind": "TOOL", "tool.name": "calculate", "input.value": '{"expression": "6 * 7"}'}
    with autogen.start_as_current_span("checker.calculate", attributes=tool):
        with core.start_as_current_span("execute_tool calculate"):
            with mcp.start_as_current_span("calculate.tool", attributes=tool_call_attributes("calculate", {})):
                pass
    with autogen.start_as_current_span("multiplier.multiply", attributes={**tool, "tool.name": "multiply"}):
        with core.start_as_current_span("execute_tool multiply"):
            pass
    with mcp.start_as_current_span("lookup.tool", attributes=tool_call_attributes("lookup", {})):
        pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    kinds = {name: s.attributes.get("openinference.span.kind") for name, s in spans.items()}
    assert kinds == {"calculate.tool": "TOOL", "execute_tool calculate": None, "checker.calculate": "CHAIN",
                     "execute_tool multiply": None, "multiplier.multiply": "TOOL", "lookup.tool": "TOOL"}  # fmt: skip
    assert spans["checker.calculate"].attributes[RECORDED_BY] == format(spans["calculate.tool"].context.span_id, "016x")
    assert RECORDED_BY not in spans["multiplier.multiply"].attributes


def test_an_agents_sdk_mcp_tool_call_is_one_tool_span() -> None:
    """An Agents SDK agent's MCP tool call (``MCPServerStdio``) is the MCP client's TOOL span; the SDK's function
    span around it is a CHAIN span recorded by it. A function tool that is not an MCP tool keeps its TOOL span."""
    pytest.importorskip("agents")
    pytest.importorskip("mcp")
    pytest.importorskip("openinference.instrumentation.openai_agents")
    from tests.agl_stream.instrumentation.frameworks.agents_mcp_spans import MODULE, script

    with ToolVllm(script) as engine:
        out = subprocess.run([sys.executable, "-m", MODULE, engine.base_url], capture_output=True, text=True,
                             cwd=REPO, env={**os.environ, "OPENAI_API_KEY": ""}, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    first, *rest = out.stdout.splitlines()
    assert json.loads(first) == {"outputs": ["the product is 42", "the product is 15"]}, out.stderr[-4000:]
    spans = [json.loads(line) for line in rest]
    mcp_run, function_run = ({s["trace"] for s in spans if s["name"] == "multiply.tool"},
                             {s["trace"] for s in spans if s["name"] == "multiply" and s["kind"] == "TOOL"})
    assert len(mcp_run) == 1 and len(function_run) == 1 and mcp_run != function_run, spans
    by_trace = {trace: [s for s in spans if s["trace"] == trace] for trace in mcp_run | function_run}
    # the MCP call: one TOOL span, the MCP client's, inside the SDK's function span, which is a CHAIN recorded by it
    (mcp_trace,) = mcp_run
    (tool,) = [s for s in by_trace[mcp_trace] if s["kind"] == "TOOL"]
    (sdk,) = [s for s in by_trace[mcp_trace] if s["name"] == "multiply" and s["scope"] != tool["scope"]]
    assert (tool["name"], tool["scope"], tool["tool"], tool["output"]) == (
        "multiply.tool", "agl_stream.instrumentation.mcp", "multiply", "42")  # fmt: skip
    assert tool["parent"] == sdk["id"]
    assert (sdk["scope"], sdk["kind"], sdk["tool"], sdk["recorded_by"]) == (
        "openinference.instrumentation.openai_agents", "CHAIN", "multiply", tool["id"])  # fmt: skip
    # the function tool: the SDK's TOOL span, no MCP span, nothing marked
    (function_trace,) = function_run
    tools = [s for s in by_trace[function_trace] if s["kind"] == "TOOL"]
    assert [(s["name"], s["tool"], s["output"], s["recorded_by"]) for s in tools] == [
        ("multiply", "multiply", 15, None)]  # fmt: skip
    assert not [s for s in spans if s["recorded_by"] is not None and s is not sdk]
