"""Agent Lightning's Calc-X agent (``examples/calc_x/calc_agent.py``), ported to agl-stream.

An AutoGen AgentChat ``AssistantAgent`` answers a math word problem with the ``calculate`` tool of an
MCP calculator server (the PyPI package ``mcp-server-calculator``, started over stdio for each rollout
through ``autogen_ext``'s ``McpWorkbench``). The model may call the tool, reads its result, and is
asked to end with ``### ANSWER: <answer> ###``; the reward is 1.0 when that answer equals the ground
truth (``eval_utils.evaluate``), emitted with ``agl.emit_reward``.

The structure, names and calls are upstream's; what changed: ``import agl_stream as agl``; the
calculator runs as ``<this python> -m mcp_server_calculator`` (upstream: ``uvx mcp-server-calculator``,
which downloads it) with upstream's later 120 s read timeout; the policy's ``max_tokens``, when the
trainer sets one, reaches the model client; only the 300 s timeout is scored as a wrong answer (other
errors fail the rollout); and ``debug()`` runs the agent under a ``DummyTracer`` (upstream drove its
in-memory store and runner by hand). AutoGen does not install beside agl-stream's pins, so this
module runs in the frameworks side venv (``make frameworks-venv``): ``train_calc_agent.py`` names it
as a string and its runners start with that venv's python. Nothing here mentions tracing: the runner
records each LLM call (token ids included, one triplet each) and the ``calculate`` call.

Try it on two made-up problems (``debug()``) against an OpenAI-compatible endpoint with tool calling::

    agl-stream serve --model smollm2 &
    cd examples/ported/calc_x
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 MODEL=smollm2 ../../../.agl/frameworks-venv/bin/python calc_agent.py
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import Any, TypedDict, cast

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams
from eval_utils import evaluate

import agl_stream as agl

OUTPUT_FORMAT = ("When you know the answer, write it between three sharps (`###`) as the last thing you say, "
                 "like this: ### ANSWER: <answer> ###.")  # fmt: skip
ANSWER_PATTERN = re.compile(r"###\s*ANSWER:\s*(.+?)(\s*###|$)")


class MathProblem(TypedDict):
    """One row of the dataset (the Calc-X columns); the agent reads ``question``, the reward ``result``."""

    id: str
    question: str
    chain: str  # the calculator steps of a reference solution (not used in training)
    result: str  # the ground truth
    source: str


def autogen_assistant_agent(
    model: str, openai_base_url: str, temperature: float, workbench: McpWorkbench, max_tokens: int | None = None
) -> AssistantAgent:
    """The AutoGen agent: it may call the workbench's tools once, then answers from their results."""
    model_client = OpenAIChatCompletionClient(
        model=model,
        base_url=openai_base_url,
        api_key=os.environ.get("OPENAI_API_KEY", "token-abc123"),
        model_info={
            "vision": False,
            "function_calling": True,
            "json_output": False,
            "family": ModelFamily.UNKNOWN,
            "structured_output": False,
        },
        temperature=temperature,
        **({"max_tokens": max_tokens} if max_tokens else {}),  # type: ignore[arg-type]
    )
    return AssistantAgent(name="calc", model_client=model_client, workbench=workbench, reflect_on_tool_use=True)


def extract_answer(last_message: str) -> str:
    """The text between ``### ANSWER:`` and ``###``, or the whole message when the format was not kept."""
    answer = ANSWER_PATTERN.search(last_message)
    return answer.group(1) if answer else last_message


@agl.rollout
async def calc_agent(task: MathProblem, llm: agl.LLM) -> None:
    """One rollout: solve the problem with the calculator and emit 1.0 (right) or 0.0 as the reward."""
    # the runner's own interpreter has the package (upstream: uvx fetches it)
    calculator_mcp_server = StdioServerParams(command=sys.executable, args=["-m", "mcp_server_calculator"],
                                              read_timeout_seconds=120)  # fmt: skip
    async with McpWorkbench(calculator_mcp_server) as workbench:
        agent = autogen_assistant_agent(llm.model, llm.endpoint, llm.sampling_parameters.get("temperature", 0.7),
                                        workbench, llm.sampling_parameters.get("max_tokens"))  # fmt: skip
        try:
            prompt = task["question"] + " " + OUTPUT_FORMAT
            # a stuck MCP call would block the rollout for good: bound the whole run, as upstream does
            result = await asyncio.wait_for(agent.run(task=prompt), timeout=300.0)
            answer = extract_answer(cast(str, result.messages[-1].content))
        except asyncio.TimeoutError:
            print("calc agent: the run took more than 300 s; counted as no answer", file=sys.stderr)
            answer = "None"
    reward = await evaluate(answer, str(task["result"]))
    agl.emit_reward(reward)
    print(f"answer: {answer} ground_truth: {task['result']} reward: {reward}")


async def debug() -> None:
    """Run the agent on two made-up problems against ``OPENAI_BASE_URL`` (model ``MODEL``) and print the rewards.

    Upstream drove a runner and an in-memory store by hand; here the rollout function is called under a
    ``DummyTracer`` (which keeps the emitted reward and exports nothing), so no stack is needed. To see
    the spans and triplets in ClickHouse, run tasks through ``agl.Trainer(..., runner_python=...).dev``
    from ``.venv``."""
    tracer = agl.DummyTracer()
    resource = agl.LLM(endpoint=os.environ["OPENAI_BASE_URL"], model=os.environ.get("MODEL", "gpt-4.1-nano"),
                       sampling_parameters={"temperature": 1.0})  # fmt: skip
    made_up_tasks: list[dict[str, Any]] = [
        {"id": "debug-1", "question": "What is 12 multiplied by 15?", "chain": "", "result": "180", "source": "debug"},
        {"id": "debug-2", "question": "A box holds 24 eggs. How many eggs are in 7 boxes minus 5 broken ones?",
         "chain": "", "result": "163", "source": "debug"},
    ]  # fmt: skip
    for task in made_up_tasks:
        async with tracer.trace_context("calc_agent", rollout_id=task["id"], attempt_id=f"{task['id']}-a1"):
            await calc_agent(cast(MathProblem, task), resource)
        print(f"{task['id']}: reward span recorded: {agl.find_final_reward(tracer.spans)}")


if __name__ == "__main__":
    asyncio.run(debug())
