"""OpenAI Agents SDK: OpenInference's instrumentation, with an MCP tool call recorded once.

``openinference-instrumentation-openai-agents`` is a trace processor of the SDK: for each SDK span it starts an
OpenTelemetry span when the SDK span starts, with its kind already set (``openinference.span.kind``: an ``Agent``
span is AGENT, a ``function`` span TOOL, a ``generation`` span LLM, ...), and makes it current until the SDK
span ends, when it adds the tool's name, input and output and ends it. A function tool that is an MCP server's
tool (``agents.mcp.MCPServerSse``, ``MCPServerStdio``) runs inside that function span through
``ClientSession.call_tool``, which :mod:`agl_stream.instrumentation.mcp` records as a TOOL span too, a child of
the SDK's: two TOOL spans for one call. As for AutoGen, the MCP span is the record (it carries the call as the
server answered it and an ERROR status when the tool failed; the SDK's span ends OK on an ``isError`` result,
which the SDK hands the model as the tool's output) and the SDK's TOOL span around it becomes a CHAIN span
marked ``agl.tool.recorded_by`` (:mod:`agl_stream.instrumentation._mcp_record`). The change is made as the MCP
span starts, through OpenInference's span wrapper too, since the wrapper sets the kind again when the span
ends; OpenInference sets no kind in between (at the end it adds ``tool.name``, ``input.value``,
``output.value``). Function tools that are not MCP tools, and handoffs, keep their TOOL spans.

The SDK's LLM calls are the OpenAI client's spans under its ``generation`` spans (docs/frameworks.md, note 3).
"""

from __future__ import annotations

from typing import Collection

from agl_stream.instrumentation._extension import OpenInferenceExtension
from agl_stream.instrumentation._mcp_record import McpRecordsToolCalls

#: the tracer OpenInference's Agents SDK trace processor starts its spans with
OPENAI_AGENTS_SCOPE = "openinference.instrumentation.openai_agents"


class OpenAIAgentsSpans(McpRecordsToolCalls):
    """Hands an Agents SDK function-tool call to the MCP span inside it (see the module doc)."""

    tool_scope = OPENAI_AGENTS_SCOPE
    framework = "OpenAI Agents SDK"


class OpenAIAgentsInstrumentor(OpenInferenceExtension):
    """OpenInference's OpenAI Agents SDK instrumentation plus :class:`OpenAIAgentsSpans` (see the module doc).

    The registry (:mod:`agl_stream.instrumentation`) instruments it when the agent imports ``agents``."""

    library = "agents"
    openinference = "openinference.instrumentation.openai_agents:OpenAIAgentsInstrumentor"
    processor = OpenAIAgentsSpans()

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("openai-agents >= 0.0.7",)
