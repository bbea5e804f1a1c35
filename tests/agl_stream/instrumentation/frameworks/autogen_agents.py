"""The AutoGen AgentChat agents of ``test_autogen.py``, run in the frameworks side venv.

AutoGen cannot install beside the stack's pins, so this module is imported only there: by ``agl-stream runner
--agent`` for :data:`calc_team`, and as ``python -m`` for :func:`tool_failures`. It imports AutoGen inside the
functions, as an agent does, which activates its tracing; the test process imports it for the constants alone.

:data:`calc_team` is a ``RoundRobinGroupChat`` of two ``AssistantAgent``\\ s: ``multiplier`` multiplies the task's
numbers with a ``FunctionTool``, then ``checker`` checks the product with mcp-server-calculator's ``calculate``
over stdio (upstream calc_x's tool), through an ``McpWorkbench`` or through ``mcp_server_tools`` adapters as
the task says. Each reflects on its tool's result: four LLM calls per rollout, streamed when the task says.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agl_stream.litagent import rollout
from agl_stream.types import LLM

MULTIPLIER, CHECKER = "multiplier", "checker"
#: what AutoGen must know of a model it has no table entry for (the engine's ``policy``)
MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
              "structured_output": False}  # fmt: skip


def question(task: dict[str, Any]) -> str:
    return f"what is {task['a']} times {task['b']}"


def product_reply(result: str) -> str:
    return f"the product is {result}"


def checked_reply(result: str) -> str:
    return f"checked: {result}"


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def calculator_server() -> Any:
    """mcp-server-calculator over stdio, run by this venv's python (the package is installed here)."""
    from autogen_ext.tools.mcp import StdioServerParams

    return StdioServerParams(command=sys.executable, args=["-m", "mcp_server_calculator"], read_timeout_seconds=30)


@rollout
async def calc_team(task: dict[str, Any], llm: LLM) -> float:
    """One team run: reward 1 when the checker confirms the product."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient
    from autogen_ext.tools.mcp import McpWorkbench, mcp_server_tools

    client = OpenAIChatCompletionClient(model=llm.model, base_url=llm.endpoint, api_key="unused", model_info=MODEL_INFO)
    stream = bool(task["stream"])
    multiplier = AssistantAgent(MULTIPLIER, model_client=client, tools=[multiply], reflect_on_tool_use=True,
                                model_client_stream=stream, system_message="Multiply with the tool.")  # fmt: skip
    check: dict[str, Any] = dict(model_client=client, reflect_on_tool_use=True, model_client_stream=stream,
                                 system_message="Check the product with the calculator.")  # fmt: skip
    # the team's task message, then one reply from each agent
    stop = MaxMessageTermination(3)
    try:
        if task["mcp"] == "workbench":
            async with McpWorkbench(calculator_server()) as calculator:
                checker = AssistantAgent(CHECKER, workbench=calculator, **check)
                result = await RoundRobinGroupChat([multiplier, checker], termination_condition=stop).run(
                    task=question(task))
        else:  # one adapter per server tool; each call opens its own session
            checker = AssistantAgent(CHECKER, tools=await mcp_server_tools(calculator_server()), **check)
            result = await RoundRobinGroupChat([multiplier, checker], termination_condition=stop).run(
                task=question(task))
    finally:
        await client.close()
    final = result.messages[-1]
    return 1.0 if getattr(final, "content", None) == checked_reply(str(task["a"] * task["b"])) else 0.0


async def _tool_failures() -> list[dict[str, Any]]:
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agl_stream.instrumentation import instrument_installed

    # as in a runner: the global provider (AutoGen's own spans use it), instrumentations armed before the import
    provider, exporter = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_trace.set_tracer_provider(provider)
    instrument_installed(provider)
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, RequestUsage
    from autogen_core.tools import FunctionTool, StaticWorkbench
    from autogen_ext.models.replay import ReplayChatCompletionClient
    from autogen_ext.tools.mcp import McpWorkbench

    def divide(a: int, b: int) -> float:
        """Divide two integers."""
        return a / b

    calls = [FunctionCall(id="c1", name="divide", arguments=json.dumps({"a": 1, "b": 0})),
             FunctionCall(id="c2", name="calculate", arguments=json.dumps({"expression": "1 +"})),
             FunctionCall(id="c3", name="calculate", arguments=json.dumps({"expression": "2 ** 10"}))]  # fmt: skip
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    model = ReplayChatCompletionClient([CreateResult(finish_reason="function_calls", content=calls, usage=usage,
                                                     cached=False)], model_info=MODEL_INFO)  # fmt: skip
    async with McpWorkbench(calculator_server()) as calculator:
        tools = StaticWorkbench([FunctionTool(divide, description="Divide two integers.")])
        agent = AssistantAgent("solver", model_client=model, workbench=[tools, calculator])
        await agent.run(task="divide 1 by 0, then evaluate '1 +' and 2 ** 10")
    provider.force_flush()
    return [{"name": s.name, "scope": s.instrumentation_scope.name if s.instrumentation_scope else None,
             "status": s.status.status_code.name, "description": s.status.description,
             "attributes": {k: v for k, v in (s.attributes or {}).items() if isinstance(v, (str, bool, int))}}
            for s in exporter.get_finished_spans()]  # fmt: skip


def tool_failures() -> None:
    """Print, as JSON, the spans of an agent whose function tool raises, whose first MCP call returns ``isError``
    and whose second succeeds (a replayed model: no engine)."""
    print(json.dumps(asyncio.run(_tool_failures())))


if __name__ == "__main__":
    tool_failures()
