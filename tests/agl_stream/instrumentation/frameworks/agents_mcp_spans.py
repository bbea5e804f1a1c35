"""An OpenAI Agents SDK agent calling an MCP tool and a function tool, its spans printed as JSON (one per line).

Run as ``python -m tests.agl_stream.instrumentation.frameworks.agents_mcp_spans <engine base url>`` by
``test_openai_agents.py``: a process of its own, because OpenInference's Agents SDK trace processor cannot be
removed from the SDK once added, and the agl-stream instrumentors are instrumented once per process. With
``server`` as the argument it is the MCP server instead (stdio, one tool: ``multiply``).

Two runs of a ``calculator`` agent under :func:`~tests.agl_stream.instrumentation.frameworks.servers.calculator`'s
script: the first with ``multiply`` on the MCP server (``MCPServerStdio``), the second with ``multiply`` as a
function tool.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tests.agl_stream.instrumentation.frameworks.servers import Reply, calculator

MODULE = "tests.agl_stream.instrumentation.frameworks.agents_mcp_spans"
PRODUCTS = {"mcp": (6, 7), "function": (3, 5)}


def script(body: dict[str, Any]) -> Reply:
    """:func:`calculator`, reading the SDK's MCP tool result too: the content blocks as JSON (``{"type": "text",
    "text": "42", ...}``) where a function tool's result is the bare text."""
    last = body["messages"][-1]
    if last.get("role") == "tool" and str(last.get("content") or "").startswith("{"):
        return f"the product is {json.loads(last['content'])['text']}"
    return calculator(body)


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("calculator", log_level="WARNING")

    @server.tool(structured_output=False)
    def multiply(a: int, b: int) -> str:
        return str(a * b)

    server.run("stdio")


async def run_agents(base_url: str) -> list[str]:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from agents.mcp import MCPServerStdio
    from openai import AsyncOpenAI

    class Mcp1Stdio(MCPServerStdio):
        """openai-agents 0.0.7 reads mcp 1's ``inputSchema`` (examples/ported/rag/agents_mcp.py)."""

        async def list_tools(self) -> list[Any]:
            from examples.ported.rag.agents_mcp import SdkTool

            return [SdkTool(t.name, t.description, dict(t.input_schema)) for t in await super().list_tools()]

    @function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    model = OpenAIChatCompletionsModel(model="policy", openai_client=AsyncOpenAI(base_url=base_url, api_key="unused"))
    outputs = []
    params = {"command": sys.executable, "args": ["-m", MODULE, "server"]}
    async with Mcp1Stdio(params=params, cache_tools_list=True) as server:
        agent = Agent(name="calculator", instructions="Multiply with the tool.", model=model, mcp_servers=[server])
        outputs.append((await Runner.run(agent, "what is %d times %d" % PRODUCTS["mcp"])).final_output)
    agent = Agent(name="calculator", instructions="Multiply with the tool.", model=model, tools=[multiply])
    outputs.append((await Runner.run(agent, "what is %d times %d" % PRODUCTS["function"])).final_output)
    return outputs


def main(base_url: str) -> None:
    from agents import set_trace_processors
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agl_stream.instrumentation.mcp import MCPInstrumentor
    from agl_stream.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])  # no export to OpenAI
    provider, exporter = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    MCPInstrumentor().instrument(tracer_provider=provider)
    print(json.dumps({"outputs": asyncio.run(run_agents(base_url))}))
    for span in exporter.get_finished_spans():
        attributes = span.attributes or {}
        print(json.dumps({
            "name": span.name, "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
            "trace": format(span.context.trace_id, "032x"), "id": format(span.context.span_id, "016x"),
            "parent": format(span.parent.span_id, "016x") if span.parent is not None else None,
            "kind": attributes.get("openinference.span.kind"), "tool": attributes.get("tool.name"),
            "recorded_by": attributes.get("agl.tool.recorded_by"), "output": attributes.get("output.value"),
        }))  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    else:
        main(sys.argv[1])
