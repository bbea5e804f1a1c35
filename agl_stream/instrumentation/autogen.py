"""AutoGen AgentChat agents: OpenInference's instrumentation, its spans mapped onto upstream's conventions.

``openinference-instrumentation-autogen-agentchat`` records, for each agent turn, an AGENT span
``<agent>.on_messages_stream``; for each model call of an ``OpenAIChatCompletionClient``, an LLM span
``<client class>.create`` / ``.create_stream``; for each tool an ``AssistantAgent`` runs, a TOOL span
``<agent>.<tool>`` (``tool.name``, the arguments as ``input.value``, the result as ``output.value``).
AutoGen's own OpenTelemetry spans come on top (its runtime's ``autogen
process <agent type>`` spans, ``invoke_agent`` / ``create_agent`` / ``execute_tool``); they are kept as they are.
What training needs from them, and what this module adds:

* **One LLM call, one span.** The client sends each call with the openai client, so the OpenAI
  instrumentation records it again, as a child ``ChatCompletion`` span: the request as sent and the
  response as the server sent it, token ids included. That span is the LLM call
  (``openai.chat.completion``, one triplet; :mod:`~agl_stream.instrumentation.conventions`); AutoGen's LLM span
  keeps no ids and stays a plain OpenInference LLM span, which the triplet adapter does not match.
* **Agent names.** Each AutoGen AGENT span gets ``agent.name`` at capture, like every framework's
  (:mod:`~agl_stream.instrumentation.conventions`): the agent's ``name`` (OpenInference's ``graph.node.id`` on an
  ``AssistantAgent``'s span; the span name less ``.on_messages_stream`` on other agents'), so calls are
  attributed to the agent whose turn it was.
* **One tool call, one TOOL span.** A tool that is an MCP tool (``McpWorkbench``, ``mcp_server_tools``) runs
  through ``ClientSession.call_tool``, which :mod:`agl_stream.instrumentation.mcp` records as a TOOL span too,
  inside AutoGen's. The MCP span is the record and AutoGen's TOOL span around it becomes a CHAIN span marked
  ``agl.tool.recorded_by`` (:mod:`agl_stream.instrumentation._mcp_record`, shared with the OpenAI Agents SDK):
  AutoGen's span ends OK whatever the result (OpenInference 0.1.22 sets OK before it looks at the result, and
  OpenTelemetry keeps the first OK), where the MCP span is an ERROR when the tool failed. Other tools
  (``FunctionTool``, ...) keep AutoGen's span, whose ``output.value`` is the error text when they fail (with
  that OK status).

The tool rule is :class:`AutoGenSpans`, a span processor acting as the spans start (attributes are still
writable then); it changes AutoGen's TOOL spans around MCP tool calls, nothing else.
"""

from __future__ import annotations

from typing import Collection

from agl_stream.instrumentation._extension import OpenInferenceExtension
from agl_stream.instrumentation._mcp_record import KIND, MCP_SCOPE, RECORDED_BY, McpRecordsToolCalls

__all__ = ["AUTOGEN_SCOPE", "AutoGenInstrumentor", "AutoGenSpans", "KIND", "MCP_SCOPE", "RECORDED_BY"]

AUTOGEN_SCOPE = "openinference.instrumentation.autogen_agentchat"


class AutoGenSpans(McpRecordsToolCalls):
    """Hands an AutoGen tool call to the MCP span inside it (see the module doc)."""

    tool_scope = AUTOGEN_SCOPE
    framework = "AutoGen"


class AutoGenInstrumentor(OpenInferenceExtension):
    """OpenInference's AutoGen AgentChat instrumentation plus :class:`AutoGenSpans` (see the module doc).

    The registry (:mod:`agl_stream.instrumentation`) instruments it when the agent imports ``autogen_agentchat``."""

    library = "autogen_agentchat"
    openinference = "openinference.instrumentation.autogen_agentchat:AutogenAgentChatInstrumentor"
    processor = AutoGenSpans()

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("autogen-agentchat >= 0.5.1",)
