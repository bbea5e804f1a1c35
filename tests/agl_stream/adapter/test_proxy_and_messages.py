"""LlmProxyTraceToTriplet (sequence-ordered proxy spans), TraceToMessages, and the adapter factory."""

from __future__ import annotations

import json

import pytest

from agl_stream.adapter import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToMessages, build_adapter
from agl_stream.adapter.proxy import PROXY_LLM_SPAN_NAMES

from tests.agl_stream.adapter.spans import SpanBuilder


def _proxy_call(b: SpanBuilder, seq: int, prompt: list[int], response: list[int], rid: str, at: float) -> None:
    b.span(
        "raw_gen_ai_request",
        at,
        at + 1,
        attributes={
            "llm.hosted_vllm.prompt_token_ids": str(prompt),
            "llm.hosted_vllm.choices": str([{"token_ids": response, "message": {"content": "x"}}]),
            "llm.hosted_vllm.id": rid,
        },
        sequence_id=seq,
    )


def test_proxy_adapter_orders_by_sequence_id_and_matches_rewards_backwards() -> None:
    b = SpanBuilder()
    # timestamps deliberately disagree with sequence ids (clock skew between proxy hosts)
    _proxy_call(b, 3, [5], [6], "c2", at=1.0)
    _proxy_call(b, 1, [1, 2], [3], "c1", at=50.0)
    b.span("litellm_request", 0.0, 1.0, attributes={"metadata.requester_custom_headers": "{}"}, sequence_id=2)
    b.reward(0.5, 0.0).sequence_id = 4  # type: ignore[misc]
    b.reward(0.9, 0.0).sequence_id = 5  # goes to the most recent call without a reward: c1
    _proxy_call(b, 6, [5], [6], "c2", at=2.0)  # same completion seen again: dropped
    triplets = LlmProxyTraceToTriplet().adapt(b.spans)
    assert [(t.prompt_token_ids, t.response_token_ids, t.reward) for t in triplets] == [
        ([1, 2], [3], 0.9),
        ([5], [6], 0.5),
    ]
    assert [t.metadata["response_id"] for t in triplets] == ["c1", "c2"]


def test_proxy_adapter_reads_standard_attributes_and_ignores_early_rewards() -> None:
    b = SpanBuilder()
    b.reward(1.0, 0.0)  # before any call: ignored
    attributes = {"prompt_token_ids": [1], "response_token_ids": [2], "response_logprobs": [-0.1], "agl.policy_version": 3}
    b.span("litellm_request", 1.0, 2.0, attributes=attributes)
    b.llm(3.0, 4.0, prompt=[5], response=[6])  # a tracer's LLM span: upstream's proxy adapter reads proxy spans only
    (triplet,) = LlmProxyTraceToTriplet().adapt(b.spans)
    assert (triplet.reward, triplet.response_logprobs, triplet.policy_version) == (None, [-0.1], 3)
    assert PROXY_LLM_SPAN_NAMES.startswith("^")


def test_trace_to_messages_rebuilds_chat_and_tools() -> None:
    """Attributes as AgentOps records an OpenAI call with tools (the layout upstream reads)."""
    b = SpanBuilder()
    first = b.llm(
        0.0,
        1.0,
        extra={
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are helpful.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "What is 2+2?",
            "gen_ai.request.functions.0.name": "add",
            "gen_ai.request.functions.0.description": "add numbers",
            "gen_ai.request.functions.0.parameters": json.dumps({"type": "object"}),
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
        },
    )
    # the tool call the completion asked for, recorded as its child span
    b.span("tool_call.add", 0.5, 0.6, first,
           {"tool.name": "add", "tool.parameters": '{"a": 2, "b": 2}', "tool.call.id": "call_1", "tool.call.type": "function"})  # fmt: skip
    b.llm(
        2.0,
        3.0,
        extra={
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "What is 2+2?",
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.1.tool_calls.0.id": "call_1",
            "gen_ai.prompt.1.tool_calls.0.name": "add",
            "gen_ai.prompt.1.tool_calls.0.arguments": '{"a": 2, "b": 2}',
            "gen_ai.prompt.2.role": "tool",
            "gen_ai.prompt.2.content": "4",
            "gen_ai.prompt.2.tool_call_id": "call_1",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "4",
        },
    )
    # any span with chat attributes is a sample (the proxy's litellm_request spans are too)
    b.span("litellm_request", 4.0, 5.0, attributes={"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi"})
    b.span("not.a.chat", 6.0, 7.0, attributes={"other": 1})
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
    first_sample, second, proxied = TraceToMessages().adapt(list(reversed(b.spans)))  # arrival order does not matter
    assert first_sample["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    assert first_sample["tools"] == [
        {"type": "function", "function": {"name": "add", "description": "add numbers", "parameters": {"type": "object"}}}
    ]
    assert second["messages"] == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "4"},
    ]
    assert second["tools"] is None
    assert proxied == {"messages": [{"role": "user", "content": "hi"}], "tools": None}
    assert len(TraceToMessages(match_names=True).adapt(b.spans)) == 2  # only openai.chat.completion spans


def test_trace_to_messages_refuses_messages_it_cannot_type() -> None:
    b = SpanBuilder()
    b.llm(0.0, 1.0, extra={"gen_ai.prompt.0.content": "no role"})
    with pytest.raises(ValueError, match="unsupported role"):
        TraceToMessages().adapt(b.spans)
    b = SpanBuilder()
    b.llm(0.0, 1.0, extra={"gen_ai.prompt.0.role": "tool", "gen_ai.prompt.0.content": "4"})
    with pytest.raises(ValueError, match="tool_call_id"):
        TraceToMessages().adapt(b.spans)


def test_build_adapter_from_spec() -> None:
    adapter = build_adapter("tracer:agent_match=write,reward_match=first_sibling,repair_hierarchy=false")
    assert isinstance(adapter, TracerTraceToTriplet)
    assert (adapter.agent_match, adapter.reward_match.value, adapter.repair_hierarchy) == ("write", "first_sibling", False)
    assert isinstance(build_adapter("LlmProxyTraceToTriplet"), LlmProxyTraceToTriplet)
    assert isinstance(build_adapter("agl_stream.adapter:TraceToMessages"), TraceToMessages)
    assert build_adapter("tracer", {"agent_match": "x"}).agent_match == "x"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown adapter"):
        build_adapter("nope")
    with pytest.raises(ValueError, match="bad options"):
        build_adapter("tracer:colour=blue")
    with pytest.raises(ValueError, match="key=value"):
        build_adapter("tracer:agent_match")
