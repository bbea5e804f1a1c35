"""Anthropic Messages API agents on the local stack: each call one triplet with the token ids the server sent,
the SDK's tool runner's tools as tool spans.

Neither ``agl-stream ingest proxy`` nor litellm (its proxy needs ``litellm[proxy]``) serves ``/v1/messages`` here,
so the agent talks to a Messages front that is a test fixture (:class:`~.servers.MessagesFront`: litellm's own
Anthropic adapter in front of the vLLM-like engine, in a process of their own), which returns the engine's
token ids as extra fields of the message (vLLM's names). The agent makes two calls per rollout (the model asks
for ``multiply``, then states the product) through ``messages.create`` (streamed or not), the
``messages.stream`` helper, or the beta tool runner (streamed or not).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from tests.agl_stream.instrumentation.frameworks.pipeline import llm_call_spans, run_agent
from tests.agl_stream.instrumentation.frameworks.servers import ServersProcess

pytestmark = pytest.mark.integration

pytest.importorskip("anthropic")
pytest.importorskip("openinference.instrumentation.anthropic")

TASKS = [
    {"api": "create", "stream": False, "a": 6, "b": 7},
    {"api": "create", "stream": True, "a": 3, "b": 5},
    {"api": "stream_helper", "stream": True, "a": 4, "b": 9},
    {"api": "tool_runner", "stream": False, "a": 8, "b": 2},
    {"api": "tool_runner", "stream": True, "a": 12, "b": 3},
]
SYSTEM = "Use the tools."
#: the OpenInference span each way of calling records (mapped onto the LLM-call span)
SOURCE_SPANS = {"create": "messages.create", "stream_helper": "messages.stream", "tool_runner": "beta.messages.create"}


def question(task: dict[str, Any]) -> str:
    return f"what is {task['a']} times {task['b']}"


def _from_events(events: Any) -> dict[str, Any]:
    """A streamed ``messages.create``'s text and tool calls, read from its events as an agent would."""
    blocks: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.type == "content_block_start":
            blocks[event.index] = {**event.content_block.model_dump(exclude_none=True), "partial": ""}
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            blocks[event.index]["text"] = blocks[event.index].get("text", "") + event.delta.text
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            blocks[event.index]["partial"] += event.delta.partial_json
    content = []
    for block in (blocks[i] for i in sorted(blocks)):
        partial = block.pop("partial")
        if block["type"] == "tool_use" and partial:
            block["input"] = json.loads(partial)
        content.append(block)
    return {"content": content}


@rollout
def anthropic_agent(task: dict[str, Any], llm: LLM) -> float:
    import anthropic
    from anthropic import beta_tool

    @beta_tool
    def multiply(a: int, b: int) -> str:
        """Multiply two integers."""
        return str(a * b)

    client = anthropic.Anthropic(base_url=llm.endpoint, api_key="unused", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": question(task)}]
    params: dict[str, Any] = dict(model=llm.model, max_tokens=64, system=SYSTEM)
    if task["api"] == "tool_runner":  # thread=False: the front keeps no server-side threads
        runner = client.beta.messages.tool_runner(**params, messages=messages, tools=[multiply], thread=False,
                                                  **({"stream": True} if task["stream"] else {}))  # fmt: skip
        for step in runner:
            if task["stream"]:
                for _ in step:
                    pass
        text = "".join(b.text for b in runner.until_done().content if b.type == "text")
    else:

        def ask() -> dict[str, Any]:
            kwargs = dict(params, messages=messages, tools=[multiply.to_dict()])
            if task["api"] == "stream_helper":
                with client.messages.stream(**kwargs) as stream:
                    return stream.get_final_message().model_dump(exclude_none=True)
            if task["stream"]:
                return _from_events(client.messages.create(**kwargs, stream=True))
            return client.messages.create(**kwargs).model_dump(exclude_none=True)

        asked = ask()
        (tool_use,) = [b for b in asked["content"] if b["type"] == "tool_use"]
        result = multiply.call(tool_use["input"])  # the agent runs the tool itself: a tool span all the same
        answer = {"type": "tool_result", "tool_use_id": tool_use["id"], "content": result}
        messages += [{"role": "assistant", "content": [tool_use]}, {"role": "user", "content": [answer]}]
        text = "".join(b.get("text", "") for b in ask()["content"] if b["type"] == "text")
    return 1.0 if text == f"the product is {task['a'] * task['b']}" else 0.0


def _asked(request: dict[str, Any]) -> str:
    """The question of an engine request (the first user turn, as the front translated it)."""
    content = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


async def test_anthropic_calls_are_one_triplet_each_with_token_ids_and_tools_are_tool_spans(topics: Settings) -> None:
    with ServersProcess("tests.agl_stream.instrumentation.frameworks.servers:calculator") as servers:
        run = await run_agent(topics, anthropic_agent, LLM(endpoint=servers.front_url, model="policy"), TASKS,
                              expected_triplets=2 * len(TASKS))  # fmt: skip
        returned = servers.returned()
    assert len(returned) == 2 * len(TASKS)
    for task, rid in zip(TASKS, run.rollout_ids):
        triplets, calls, spans = run.triplets[rid], llm_call_spans(run.spans[rid]), run.spans[rid]
        assert len(triplets) == 2 and len(calls) == 2, (task, [name for name, _ in spans])
        assert {attrs["agl.source_span_name"] for attrs in calls} == {SOURCE_SPANS[task["api"]]}
        assert {attrs["gen_ai.request.streaming"] for attrs in calls} == {str(task["stream"]).lower()}
        assert calls[0]["gen_ai.prompt.0.role"] == "system" and calls[0]["gen_ai.prompt.1.content"] == question(task)
        (call,) = json.loads(calls[0]["gen_ai.completion.0.tool_calls"])
        assert call["function"]["name"] == "multiply" and calls[0]["gen_ai.completion.0.finish_reason"] == "tool_calls"
        assert calls[1]["gen_ai.prompt.3.role"] == "tool" and calls[1]["gen_ai.prompt.3.tool_call_id"] == call["id"]
        assert calls[1]["gen_ai.completion.0.content"] == f"the product is {task['a'] * task['b']}"
        # the ids the engine sent, through the front's extra fields, on each call's triplet
        sent = [r for r in returned if _asked(r["request"]) == question(task)]
        assert [t.prompt_token_ids for t in triplets] == [r["prompt_token_ids"] for r in sent]
        assert [t.response_token_ids for t in triplets] == [r["response_token_ids"] for r in sent]
        assert all(r["prompt_token_ids"] and r["response_token_ids"] for r in sent)
        tools = [attrs for name, attrs in spans if attrs.get("openinference.span.kind") == "TOOL"]
        assert [(t["tool.name"], t["output.value"]) for t in tools] == [("multiply", str(task["a"] * task["b"]))]
