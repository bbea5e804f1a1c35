"""AutoGen AgentChat agents on the local stack: agent names, tool spans, and the LLM calls' token ids.

The agent (``autogen_agents.calc_team``) runs in a runner process of the frameworks side venv (AutoGen cannot
install beside the stack's pins); the broker, processors, ClickHouse and the engine run here. A
``RoundRobinGroupChat`` of ``multiplier`` (a ``FunctionTool``) and ``checker`` (mcp-server-calculator's
``calculate`` over stdio, through an ``McpWorkbench`` in one task and ``mcp_server_tools`` adapters in the other)
makes four LLM calls per rollout, the second task streamed (``model_client_stream``). Each call is the OpenAI
client's span under AutoGen's own LLM span, so it is one triplet with the engine's token ids; each triplet names
the agent whose turn it was; each tool call is one TOOL span: AutoGen's for the function tool, the MCP client's
for the calculator (AutoGen's around it a CHAIN span).

``test_autogen_tool_failures`` runs a replayed model (no engine, no stack) in the side venv: a function tool
that raises, an MCP call that returns ``isError`` and one that succeeds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.instrumentation.conventions import normalize
from agl_stream.types import LLM
from tests.agl_stream.instrumentation.frameworks.autogen_agents import (
    CHECKER,
    MULTIPLIER,
    checked_reply,
    product_reply,
    question,
)
from tests.agl_stream.instrumentation.frameworks.pipeline import ROOT, llm_call_spans, run_agent_in_venv
from tests.agl_stream.instrumentation.frameworks.servers import Reply, ToolCall, ToolVllm
from tests.frameworks_venv import frameworks_python

pytestmark = pytest.mark.integration

AGENT = "tests.agl_stream.instrumentation.frameworks.autogen_agents:calc_team"
SIDE_VENV_MODULES = ("autogen_agentchat", "autogen_ext.models.openai", "autogen_ext.tools.mcp",
                     "openinference.instrumentation.autogen_agentchat", "mcp_server_calculator")  # fmt: skip
TASKS = [{"a": 6, "b": 7, "stream": False, "mcp": "workbench"}, {"a": 3, "b": 5, "stream": True, "mcp": "adapters"}]
CALLS_PER_ROLLOUT = 4  # each agent: a tool call, then its reflection on the result


def calc_team_model(body: dict[str, Any]) -> Reply:
    """The engine's script: call the offered tool on the question's numbers; once it answered, state its result
    (``multiply``'s as the product, ``calculate``'s as the check)."""
    messages = body["messages"]
    last = messages[-1]
    if last.get("role") == "tool":
        called = next(call["function"]["name"] for m in reversed(messages) for call in m.get("tool_calls") or [])
        result = tool_text(str(last.get("content") or ""))
        return product_reply(result) if called == "multiply" else checked_reply(result)
    offered = {str((tool.get("function") or {}).get("name")) for tool in body.get("tools") or []}
    numbers = re.search(r"(\d+) times (\d+)", next(str(m.get("content")) for m in messages if m.get("role") == "user"))
    if numbers and "multiply" in offered:
        return ToolCall("multiply", {"a": int(numbers[1]), "b": int(numbers[2])})
    if numbers and "calculate" in offered:
        return ToolCall("calculate", {"expression": f"{numbers[1]} * {numbers[2]}"})
    return "I cannot tell"


def tool_text(content: str) -> str:
    """A tool result as the model reads it: ``mcp_server_tools`` adapters hand the MCP content blocks on as JSON."""
    try:
        blocks = json.loads(content)
    except ValueError:
        return content.strip()
    if isinstance(blocks, list):
        return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict)).strip()
    return content.strip()


def kind(attrs: dict[str, str]) -> str:
    return attrs.get("openinference.span.kind", "")


@pytest.mark.parametrize("runtime_tracing", [True, False], ids=["runtime-traced", "runtime-untraced"])
async def test_autogen_team_agent_names_tool_spans_and_token_ids(topics: Settings, runtime_tracing: bool) -> None:
    """Also with AutoGen's runtime tracing off (``AUTOGEN_DISABLE_RUNTIME_TRACING``), which drops the
    runtime's message spans and nothing training reads."""
    python = frameworks_python(*SIDE_VENV_MODULES)
    env = {} if runtime_tracing else {"AUTOGEN_DISABLE_RUNTIME_TRACING": "true"}
    with ToolVllm(calc_team_model) as engine:
        run = await run_agent_in_venv(topics, python, AGENT, LLM(endpoint=engine.base_url, model="policy"), TASKS,
                                      expected_triplets=CALLS_PER_ROLLOUT * len(TASKS), env=env)  # fmt: skip
    assert len(engine.returned) == CALLS_PER_ROLLOUT * len(TASKS)
    for task, rid in zip(TASKS, run.rollout_ids):
        triplets, calls, spans = run.triplets[rid], llm_call_spans(run.spans[rid]), run.spans[rid]
        assert len(triplets) == CALLS_PER_ROLLOUT and len(calls) == CALLS_PER_ROLLOUT, (task, [n for n, _ in spans])
        assert any(name.startswith("autogen process ") for name, _ in spans) is runtime_tracing
        # one LLM call, one span: AutoGen's own LLM span around each OpenAI client span is not an LLM call
        autogen_llm = [name for name, attrs in spans if kind(attrs) == "LLM" and name != "openai.chat.completion"]
        create = "OpenAIChatCompletionClient.create_stream" if task["stream"] else "OpenAIChatCompletionClient.create"
        assert autogen_llm == [create] * CALLS_PER_ROLLOUT, autogen_llm
        assert {c["gen_ai.request.streaming"] for c in calls} == {str(task["stream"]).lower()}, calls[0]
        # each call made by the agent whose turn it was
        assert [t.metadata["agent_name"] for t in triplets] == [MULTIPLIER, MULTIPLIER, CHECKER, CHECKER]
        agents = [attrs.get("agent.name") for _, attrs in spans if kind(attrs) == "AGENT"]
        assert agents == [MULTIPLIER, CHECKER], agents
        product = str(task["a"] * task["b"])
        assert [json.loads(c["gen_ai.completion.0.tool_calls"])[0]["function"]["name"] for c in calls[0::2]] == [
            "multiply", "calculate"]  # fmt: skip
        assert [c["gen_ai.completion.0.content"] for c in calls[1::2]] == [product_reply(product),
                                                                          checked_reply(product)]  # fmt: skip
        # one TOOL span per tool call: AutoGen's for the function tool, the MCP client's for the calculator
        tools = [(name, attrs.get("tool.name"), json.loads(attrs["input.value"]), attrs.get("output.value"))
                 for name, attrs in spans if kind(attrs) == "TOOL"]  # fmt: skip
        assert tools == [(f"{MULTIPLIER}.multiply", "multiply", {"a": task["a"], "b": task["b"]}, product),
                         ("calculate.tool", "calculate", {"expression": f"{task['a']} * {task['b']}"}, product)], tools
        mcp_span_id = next(attrs["agl.tool.recorded_by"] for name, attrs in spans if name == f"{CHECKER}.calculate")
        assert kind(dict(spans)[f"{CHECKER}.calculate"]) == "CHAIN" and len(mcp_span_id) == 16
        # the ids the engine sent for each call, on its triplet, in order
        sent = [r for r in engine.returned if any(m.get("content") == question(task) for m in r.request["messages"])]
        assert [t.prompt_token_ids for t in triplets] == [r.prompt_token_ids for r in sent]
        assert [t.response_token_ids for t in triplets] == [r.response_token_ids for r in sent]
        assert all(r.prompt_token_ids and r.response_token_ids for r in sent)


def test_autogen_tool_failures() -> None:
    """Failed tools at span level (the agent runs its three calls concurrently: compared in no order)."""
    python = frameworks_python(*SIDE_VENV_MODULES)
    done = subprocess.run([str(python), "-m", "tests.agl_stream.instrumentation.frameworks.autogen_agents"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    spans = json.loads(done.stdout)
    tools = sorted((s["name"], s["attributes"].get("tool.name"), s["status"], s["attributes"].get("output.value"))
                   for s in spans if s["attributes"].get("openinference.span.kind") == "TOOL")  # fmt: skip
    bad_expression = next(s["attributes"]["output.value"] for s in spans if s["name"] == "calculate.tool"
                          and s["status"] == "ERROR")  # fmt: skip
    assert bad_expression.startswith("Error executing tool calculate"), bad_expression
    # OpenInference 0.1.22 ends a failed function tool's span OK (docs/frameworks.md): the error is its output
    assert tools == [("calculate.tool", "calculate", "ERROR", bad_expression),
                     ("calculate.tool", "calculate", "UNSET", "1024"),
                     ("solver.divide", "divide", "OK", "division by zero")], tools  # fmt: skip
    mcp = sorted((s["attributes"]["output.value"], s["attributes"].get("mcp.tool.is_error"))
                 for s in spans if s["name"] == "calculate.tool")  # fmt: skip
    assert mcp == [("1024", False), (bad_expression, True)]
    handed = sorted((s["attributes"]["openinference.span.kind"], s["attributes"]["output.value"])
                    for s in spans if s["name"] == "solver.calculate")  # fmt: skip
    assert handed == [("CHAIN", "1024"), ("CHAIN", bad_expression)]
    # the agent's name, as the capture maps its span
    assert [normalize(s["name"], s["attributes"])[1]["agent.name"] for s in spans
            if s["name"] == "solver.on_messages_stream"] == ["solver"]  # fmt: skip
