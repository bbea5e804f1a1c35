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
    b.llm(1.0, 2.0, prompt=[1], response=[2], extra={"response_logprobs": [-0.1], "agl.policy_version": 3})
    (triplet,) = LlmProxyTraceToTriplet().adapt(b.spans)
    assert (triplet.reward, triplet.response_logprobs, triplet.policy_version) == (None, [-0.1], 3)
    assert PROXY_LLM_SPAN_NAMES.startswith("^")


def test_trace_to_messages_rebuilds_chat_and_tools() -> None:
    b = SpanBuilder()
    b.llm(
        0.0,
        1.0,
        extra={
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are helpful.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "What is 2+2?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": None,
            "gen_ai.completion.0.tool_calls.0.id": "call_1",
            "gen_ai.completion.0.tool_calls.0.name": "add",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"a": 2, "b": 2}',
            "llm.request.functions.0.name": "add",
            "llm.request.functions.0.description": "add numbers",
            "llm.request.functions.0.parameters": json.dumps({"type": "object"}),
        },
    )
    b.llm(
        2.0,
        3.0,
        extra={
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "What is 2+2?",
            "gen_ai.prompt.1.role": "tool",
            "gen_ai.prompt.1.content": "4",
            "gen_ai.prompt.1.tool_call_id": "call_1",
            "gen_ai.completion.0.content": "4",
        },
    )
    b.span("not.an.llm", 4.0, 5.0, attributes={"gen_ai.prompt.0.content": "ignored"})
    first, second = TraceToMessages().adapt(b.spans)
    assert first["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What is 2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
            ],
        },
    ]
    assert first["tools"] == [
        {"type": "function", "function": {"name": "add", "description": "add numbers", "parameters": {"type": "object"}}}
    ]
    assert second["messages"][1] == {"role": "tool", "content": "4", "tool_call_id": "call_1"}
    assert second["messages"][2] == {"role": "assistant", "content": "4"}
    assert second["tools"] is None


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
