"""LiteLLM SDK agents on the local stack: one triplet per LLM call, with the token ids the server returned.

The agent imports litellm inside the rollout (activation on import), runs a two-call tool loop (the model asks
for ``multiply``, the agent runs it, the model states the product) with ``completion`` or ``acompletion``,
streamed or not. With ``openai/policy`` litellm calls through the openai client: the OpenAI span is the LLM
call and litellm's own span stays a plain LLM span. With ``hosted_vllm/policy`` litellm calls over its own
HTTP client: its span is the LLM call (recorded by agl-stream's wrapper). Either way each call is one
``openai.chat.completion`` span and one triplet whose ids are what the engine sent (litellm drops the prompt
ids of ``hosted_vllm`` streams: those triplets have the response ids only).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from tests.agl_stream.instrumentation.frameworks.pipeline import llm_call_spans, run_agent
from tests.agl_stream.instrumentation.frameworks.servers import LITELLM_OFFLINE, ToolVllm, calculator

pytestmark = pytest.mark.integration

for _name in LITELLM_OFFLINE:  # else importing litellm fetches them from GitHub (offline: ~10 s of retries)
    os.environ.setdefault(_name, "True")
pytest.importorskip("litellm")
pytest.importorskip("openinference.instrumentation.litellm")

TOOLS = [{"type": "function", "function": {"name": "multiply", "description": "Multiply two integers.",
                                           "parameters": {"type": "object", "required": ["a", "b"],
                                                          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]  # fmt: skip
TASKS = [  # (provider, async, stream): every combination through the openai client, both streams over litellm's own
    {"provider": "openai", "async": False, "stream": False, "a": 6, "b": 7},
    {"provider": "openai", "async": False, "stream": True, "a": 3, "b": 5},
    {"provider": "openai", "async": True, "stream": False, "a": 4, "b": 9},
    {"provider": "openai", "async": True, "stream": True, "a": 8, "b": 2},
    {"provider": "hosted_vllm", "async": False, "stream": False, "a": 12, "b": 3},
    {"provider": "hosted_vllm", "async": True, "stream": True, "a": 11, "b": 11},
]


async def _ask(task: dict[str, Any], llm: LLM, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One litellm call as the task says; the assistant message it produced."""
    import litellm

    litellm.suppress_debug_info = True  # it prints a provider list for the served model name "policy"
    kwargs: dict[str, Any] = dict(model=f"{task['provider']}/{llm.model}", api_base=llm.endpoint, api_key="unused",
                                  messages=messages, tools=TOOLS, max_tokens=32, stream=task["stream"])  # fmt: skip
    reply = await litellm.acompletion(**kwargs) if task["async"] else litellm.completion(**kwargs)
    if not task["stream"]:
        return reply.choices[0].message.model_dump(exclude_none=True)
    chunks = [chunk async for chunk in reply] if task["async"] else list(reply)
    return litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message.model_dump(exclude_none=True)


def question(task: dict[str, Any]) -> str:
    return f"what is {task['a']} times {task['b']}"


@rollout
async def litellm_agent(task: dict[str, Any], llm: LLM) -> float:
    messages: list[dict[str, Any]] = [{"role": "user", "content": question(task)}]
    asked = await _ask(task, llm, messages)
    (call,) = asked["tool_calls"]
    arguments = json.loads(call["function"]["arguments"])
    messages += [asked, {"role": "tool", "tool_call_id": call["id"], "content": str(arguments["a"] * arguments["b"])}]
    answer = await _ask(task, llm, messages)
    return 1.0 if answer.get("content") == f"the product is {task['a'] * task['b']}" else 0.0


async def test_litellm_calls_are_one_triplet_each_with_the_servers_token_ids(topics: Settings) -> None:
    with ToolVllm(calculator) as engine:
        run = await run_agent(topics, litellm_agent, LLM(endpoint=engine.base_url, model="policy"), TASKS,
                              expected_triplets=2 * len(TASKS))  # fmt: skip
    assert len(engine.returned) == 2 * len(TASKS) and all(r.request.get("return_token_ids") for r in engine.returned)
    for task, rid in zip(TASKS, run.rollout_ids):
        triplets, calls = run.triplets[rid], llm_call_spans(run.spans[rid])
        assert len(triplets) == 2 and len(calls) == 2, (task, [name for name, _ in run.spans[rid]])
        # the LLM-call span is the openai client's when litellm used it, else litellm's own (which is always there)
        litellm_name = "acompletion" if task["async"] else "completion"
        source = "ChatCompletion" if task["provider"] == "openai" else litellm_name
        assert {attrs["agl.source_span_name"] for attrs in calls} == {source}
        assert [name for name, _ in run.spans[rid]].count(litellm_name) == (2 if task["provider"] == "openai" else 0)
        assert {attrs["gen_ai.request.streaming"] for attrs in calls} == {str(task["stream"]).lower()}
        assert json.loads(calls[0]["gen_ai.completion.0.tool_calls"])[0]["function"]["name"] == "multiply"
        assert calls[1]["gen_ai.completion.0.content"] == f"the product is {task['a'] * task['b']}"
        # each call's triplet carries the ids the engine sent for it
        sent = [r for r in engine.returned if r.request["messages"][0]["content"] == question(task)]
        assert [t.response_token_ids for t in triplets] == [r.response_token_ids for r in sent]
        assert all(r.response_token_ids and r.prompt_token_ids for r in sent)
        if task["provider"] == "hosted_vllm" and task["stream"]:  # litellm drops vLLM's prompt ids from these streams
            assert [t.prompt_token_ids for t in triplets] == [[], []]
        else:
            assert [t.prompt_token_ids for t in triplets] == [r.prompt_token_ids for r in sent]
        assert all(t.metadata["request"]["streaming"] is task["stream"] for t in triplets), triplets[0].metadata
