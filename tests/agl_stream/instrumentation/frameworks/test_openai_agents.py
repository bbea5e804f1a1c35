"""OpenAI Agents SDK agents on the local stack: agent names, tool spans, and the LLM calls' token ids.

A ``triage`` agent hands off to a ``calculator`` agent, which calls the ``multiply`` function tool and states
the product: three LLM calls per rollout through the SDK's chat-completions model (the local engine speaks
chat completions). OpenInference's Agents instrumentation records the agents (AGENT spans, ``agent.name``)
and the tool (a TOOL span); each LLM call is the OpenAI client's span under the SDK's ``generation`` span,
so it carries the engine's token ids, and its triplet the name of the agent that made it. Not streamed:
openai-agents 0.0.7, the newest release that installs beside openai 2.x, cannot stream with it (its
``ResponseCreatedEvent`` lacks the ``sequence_number`` openai 2.x requires).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from tests.agl_stream.instrumentation.frameworks.pipeline import llm_call_spans, run_agent
from tests.agl_stream.instrumentation.frameworks.servers import ToolVllm, calculator

pytestmark = pytest.mark.integration

pytest.importorskip("agents")
pytest.importorskip("openinference.instrumentation.openai_agents")

TASKS = [{"a": 6, "b": 7}, {"a": 3, "b": 5}]


def question(task: dict[str, Any]) -> str:
    return f"what is {task['a']} times {task['b']}"


@rollout
async def agents_sdk_agent(task: dict[str, Any], llm: LLM) -> float:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    model = OpenAIChatCompletionsModel(model=llm.model, openai_client=client)  # the engine speaks chat completions
    calculator_agent = Agent(name="calculator", instructions="Multiply with the tool.", model=model, tools=[multiply])
    triage = Agent(name="triage", instructions="Hand arithmetic to the calculator.", model=model,
                   handoffs=[calculator_agent])  # fmt: skip
    result = await Runner.run(triage, question(task))
    return 1.0 if result.final_output == f"the product is {task['a'] * task['b']}" else 0.0


async def test_agents_sdk_agent_names_tool_spans_and_token_ids(topics: Settings) -> None:
    with ToolVllm(calculator) as engine:
        run = await run_agent(topics, agents_sdk_agent, LLM(endpoint=engine.base_url, model="policy"), TASKS,
                              expected_triplets=3 * len(TASKS))  # fmt: skip
    assert len(engine.returned) == 3 * len(TASKS)
    for task, rid in zip(TASKS, run.rollout_ids):
        triplets, calls, spans = run.triplets[rid], llm_call_spans(run.spans[rid]), run.spans[rid]
        assert len(triplets) == 3 and len(calls) == 3, (task, [name for name, _ in spans])
        # each call made by the agent whose turn it was
        assert [t.metadata["agent_name"] for t in triplets] == ["triage", "calculator", "calculator"]
        agents = {attrs.get("agent.name") for _, attrs in spans if attrs.get("openinference.span.kind") == "AGENT"}
        assert {"triage", "calculator"} <= agents
        assert [json.loads(c["gen_ai.completion.0.tool_calls"])[0]["function"]["name"] for c in calls[:2]] == [
            "transfer_to_calculator", "multiply"]  # fmt: skip
        assert calls[2]["gen_ai.completion.0.content"] == f"the product is {task['a'] * task['b']}"
        tools = [(name, attrs.get("tool.name"), attrs.get("output.value")) for name, attrs in spans
                 if attrs.get("openinference.span.kind") == "TOOL"]  # fmt: skip
        assert ("multiply", "multiply", str(task["a"] * task["b"])) in tools, tools
        # the ids the engine sent for each call, on its triplet
        sent = [r for r in engine.returned if any(m.get("content") == question(task) for m in r.request["messages"])]
        assert [t.prompt_token_ids for t in triplets] == [r.prompt_token_ids for r in sent]
        assert [t.response_token_ids for t in triplets] == [r.response_token_ids for r in sent]
        assert all(r.prompt_token_ids and r.response_token_ids for r in sent)
