"""CrewAI crews on the local stack: agent names, tool spans, and the LLM calls' token ids.

CrewAI needs pydantic < 2.13, so its runner runs in the frameworks side venv (``crewai_agents.py``) while the
broker, processors and ClickHouse run here. The sequential crew makes three LLM calls per rollout: the
``calculator`` agent asks for the ``multiply`` tool and states its result, then the ``writer`` agent reports it.
OpenInference's CrewAI instrumentation records the crew, one AGENT span per task (``graph.node.id`` = the
agent's role, which the mapping makes ``agent.name``) and the tool (a TOOL span); CrewAI's native OpenAI
provider calls the openai client, whose spans are the LLM calls (CrewAI itself leaves no LLM span), so each
carries the engine's token ids and its triplet the role of the agent that made it. The writer's structured output
(``output_pydantic``: the openai client's ``parse``, or ``stream`` when streamed) asks for token ids too. Streamed
(``LLM(stream=True)``) and ``kickoff_async`` (the crew in a thread) are traced the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.types import LLM
from tests.agl_stream.instrumentation.frameworks import crewai_agents
from tests.agl_stream.instrumentation.frameworks.crewai_agents import (CALCULATOR, CREWAI_OFFLINE, WRITER, question,
                                                                      report)  # fmt: skip
from tests.agl_stream.instrumentation.frameworks.pipeline import llm_call_spans, run_agent_in_venv
from tests.agl_stream.instrumentation.frameworks.servers import Reply, Returned, ToolCall, ToolVllm
from tests.frameworks_venv import ROOT, frameworks_python

pytestmark = pytest.mark.integration

AGENT = f"{crewai_agents.__name__}:crewai_agent"  # loaded by the runner in the side venv
TASKS = [
    {"a": 6, "b": 7, "stream": False, "kickoff": "sync"},
    {"a": 3, "b": 5, "stream": True, "kickoff": "sync"},
    {"a": 4, "b": 9, "stream": False, "kickoff": "async"},
]
CALLS = 3  # per rollout: calculator (tool call, answer), writer (report)


def crew_model(body: dict[str, Any]) -> Reply:
    """The scripted model: states a tool's result, asks for ``multiply`` when it is offered and the task asks for
    a product, and reports a product stated earlier in the conversation (the writer's task context), as JSON
    when a response format is asked for."""
    messages = body["messages"]
    if messages[-1].get("role") == "tool":
        return f"the product is {str(messages[-1].get('content') or '').strip()}"
    offered = {str((tool.get("function") or {}).get("name")) for tool in body.get("tools") or []}
    text = " ".join(str(m.get("content") or "") for m in messages)
    numbers = re.search(r"what is (\d+) times (\d+)", text)
    if "multiply" in offered and numbers:
        return ToolCall("multiply", {"a": int(numbers[1]), "b": int(numbers[2])})
    stated = re.search(r"the product is (\d+)", text)
    answer = report(int(stated[1])) if stated else "I cannot tell"
    return json.dumps({"sentence": answer}) if body.get("response_format") else answer


def _sent_for(task: dict[str, Any], returned: list[Returned]) -> list[Returned]:
    """The engine's replies to this task's crew, in order: its question or its product is in every prompt."""
    marks = (question(task), f"the product is {task['a'] * task['b']}")
    return [r for r in returned if any(m in " ".join(str(x.get("content") or "") for x in r.request["messages"])
                                       for m in marks)]  # fmt: skip


async def test_crewai_agent_names_tool_spans_and_token_ids(topics: Settings) -> None:
    python = frameworks_python("crewai", "openinference.instrumentation.crewai")
    with ToolVllm(crew_model) as engine:
        run = await run_agent_in_venv(topics, python, AGENT, LLM(endpoint=engine.base_url, model="policy"), TASKS,
                                      expected_triplets=CALLS * len(TASKS), env=CREWAI_OFFLINE)  # fmt: skip
    assert len(engine.returned) == CALLS * len(TASKS)
    assert all(r.request.get("return_token_ids") for r in engine.returned)  # CrewAI passed our extra_body on
    for task, rid in zip(TASKS, run.rollout_ids):
        triplets, calls, spans = run.triplets[rid], llm_call_spans(run.spans[rid]), run.spans[rid]
        # one LLM-call span and one triplet per call; CrewAI adds no LLM span of its own
        assert len(triplets) == CALLS and len(calls) == CALLS, (task, [name for name, _ in spans])
        llm_spans = [name for name, a in spans if a.get("openinference.span.kind") == "LLM"]
        assert llm_spans == ["openai.chat.completion"] * CALLS
        assert {a["gen_ai.request.streaming"] for a in calls} == {str(task["stream"]).lower()}
        # each call made by the agent whose task it was: the AGENT span's graph.node.id (the role), not its name
        assert [t.metadata["agent_name"] for t in triplets] == [CALCULATOR, CALCULATOR, WRITER]
        agents = [(name, a.get("agent.name")) for name, a in spans if a.get("openinference.span.kind") == "AGENT"]
        assert agents == [(f"{CALCULATOR}.compute._execute_core", CALCULATOR),
                          (f"{WRITER}.write._execute_core", WRITER)]  # fmt: skip
        assert [name for name, _ in spans].count("arithmetic.kickoff") == 1
        assert json.loads(calls[0]["gen_ai.completion.0.tool_calls"])[0]["function"]["name"] == "multiply"
        product = task["a"] * task["b"]
        assert [c["gen_ai.completion.0.content"] for c in calls[1:]] == [
            f"the product is {product}", json.dumps({"sentence": report(product)})]  # fmt: skip
        assert "response_format" in json.loads(calls[2]["input.value"])  # the writer's structured output
        # the tool's execution
        tools = [(name, a.get("tool.name"), json.loads(a.get("input.value") or "null"), a.get("output.value"))
                 for name, a in spans if a.get("openinference.span.kind") == "TOOL"]  # fmt: skip
        assert tools == [("multiply.run", "multiply", {"a": task["a"], "b": task["b"]}, str(product))], tools
        # the ids the engine sent for each call, on its triplet, in order
        sent = _sent_for(task, engine.returned)
        assert len(sent) == CALLS and all(r.prompt_token_ids and r.response_token_ids for r in sent)
        assert [t.prompt_token_ids for t in triplets] == [r.prompt_token_ids for r in sent]
        assert [t.response_token_ids for t in triplets] == [r.response_token_ids for r in sent]


def test_crewai_is_traced_once_the_agent_imports_it() -> None:
    """Starting the tracer arms CrewAI's instrumentation without importing crewai; importing it activates it."""
    python = frameworks_python("crewai", "openinference.instrumentation.crewai")
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from agl_stream.instrumentation import active, instrument_installed\n"
        "print('armed:' + ','.join(instrument_installed(TracerProvider())))\n"
        "print('imported:' + str('crewai' in sys.modules))\n"
        "import crewai\n"
        "print('active:' + ','.join(active()))\n"
    )
    env = {**os.environ, **CREWAI_OFFLINE, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(":", 1) for line in out.stdout.split())
    assert "crewai" in lines["armed"].split(",") and lines["imported"] == "False", out.stdout
    assert {"crewai", "openai"} <= set(lines["active"].split(",")), out.stdout + out.stderr
