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
* **Agent names.** :class:`AutoGenSpans` gives each AutoGen AGENT span ``agent.name``: the agent's ``name``
  (OpenInference's ``graph.node.id`` on an ``AssistantAgent``'s span; the span name's prefix on other agents'),
  so calls are attributed to the agent whose turn it was.
* **One tool call, one TOOL span.** A tool that is an MCP tool (``McpWorkbench``, ``mcp_server_tools``) runs
  through ``ClientSession.call_tool``, which :mod:`agl_stream.instrumentation.mcp` records as a TOOL span too,
  inside AutoGen's: two TOOL spans for one call, and AIR's rules would fire twice. As with LLM calls, the inner
  span is the record: it has the call as the server answered it, and an ERROR status when the tool failed,
  where AutoGen's span ends OK whatever the result (OpenInference 0.1.22 sets OK before it looks at the result,
  and OpenTelemetry keeps the first OK). When the MCP span starts, AutoGen's TOOL span around it becomes a
  CHAIN span marked ``agl.tool.recorded_by`` (the MCP span's id). OpenInference keeps the span kind in its
  span wrapper and sets it again when the span ends, so the kind is changed through that wrapper too (the
  span current where the tool span's children start). Other tools (``FunctionTool``, ...) keep AutoGen's
  span, whose ``output.value`` is the error text when they fail (with that OK status).

Both are done by a span processor as the spans start (attributes are still writable then); it changes AutoGen's
AGENT spans and its TOOL spans around MCP tool calls, nothing else.
"""

from __future__ import annotations

import logging
from typing import Any, Collection, Optional

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from agl_stream.instrumentation._extension import OpenInferenceExtension

logger = logging.getLogger(__name__)

KIND = "openinference.span.kind"
AGENT_NAME = "agent.name"
GRAPH_NODE_ID = "graph.node.id"
#: set on AutoGen's TOOL span when an MCP tool span inside it records the call: that span's id
RECORDED_BY = "agl.tool.recorded_by"
AUTOGEN_SCOPE = "openinference.instrumentation.autogen_agentchat"
MCP_SCOPE = "agl_stream.instrumentation.mcp"
AGENT_SPAN_SUFFIX = ".on_messages_stream"


def _scope(span: Any) -> Optional[str]:
    return getattr(getattr(span, "instrumentation_scope", None), "name", None)


def agent_name(span_name: str, node_id: Any) -> str:
    """The name of the agent an AutoGen AGENT span stands for: ``graph.node.id`` where OpenInference set it
    (``AssistantAgent``), else the span name less ``.on_messages_stream`` (AutoGen agent names are identifiers)."""
    if isinstance(node_id, str) and node_id:
        return node_id
    return span_name[: -len(AGENT_SPAN_SUFFIX)] if span_name.endswith(AGENT_SPAN_SUFFIX) else span_name


class AutoGenSpans(SpanProcessor):
    """Names AutoGen's agent spans and hands an AutoGen tool call to the MCP span inside it (see the module doc).

    ``_enclosing`` maps each open span under an AutoGen TOOL span (and that span itself) to the innermost such
    TOOL span, so an MCP tool span finds it however many spans lie between (AutoGen's ``execute_tool``);
    ``_wrappers`` holds OpenInference's wrapper of each open AutoGen TOOL span, seen as its children start."""

    def __init__(self) -> None:
        self.active = False
        self._enclosing: dict[int, Any] = {}
        self._wrappers: dict[int, Any] = {}
        self._warned_unwrapped = False

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if not self.active:
            return
        scope, attributes = _scope(span), span.attributes or {}
        kind = attributes.get(KIND)
        parent_id = span.parent.span_id if span.parent is not None else None
        enclosing = self._enclosing.get(parent_id) if parent_id is not None else None
        if enclosing is not None and enclosing.context.span_id == parent_id and parent_id not in self._wrappers:
            current = otel_trace.get_current_span(parent_context)
            if current is not enclosing and current.get_span_context().span_id == parent_id:
                self._wrappers[parent_id] = current
        if scope == AUTOGEN_SCOPE and kind == "AGENT" and AGENT_NAME not in attributes:
            span.set_attribute(AGENT_NAME, agent_name(span.name, attributes.get(GRAPH_NODE_ID)))
        elif scope == AUTOGEN_SCOPE and kind == "TOOL":
            enclosing = span
        elif scope == MCP_SCOPE and kind == "TOOL" and enclosing is not None and enclosing.is_recording():
            enclosing.set_attribute(KIND, "CHAIN")
            enclosing.set_attribute(RECORDED_BY, format(span.context.span_id, "016x"))
            wrapper = self._wrappers.get(enclosing.context.span_id)
            if wrapper is not None:
                wrapper.set_attribute(KIND, "CHAIN")  # the kind OpenInference sets again when the span ends
            elif not self._warned_unwrapped:
                self._warned_unwrapped = True
                logger.warning("no OpenInference wrapper seen for the AutoGen tool span %r: it may end as a TOOL span "
                               "beside the MCP call's", enclosing.name)  # fmt: skip
        if enclosing is not None:
            self._enclosing[span.context.span_id] = enclosing

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None:
            self._enclosing.pop(span.context.span_id, None)
            self._wrappers.pop(span.context.span_id, None)

    def shutdown(self) -> None:
        self._enclosing.clear()
        self._wrappers.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class AutoGenInstrumentor(OpenInferenceExtension):
    """OpenInference's AutoGen AgentChat instrumentation plus :class:`AutoGenSpans` (see the module doc).

    The registry (:mod:`agl_stream.instrumentation`) instruments it when the agent imports ``autogen_agentchat``."""

    library = "autogen_agentchat"
    openinference = "openinference.instrumentation.autogen_agentchat:AutogenAgentChatInstrumentor"
    processor = AutoGenSpans()

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("autogen-agentchat >= 0.5.1",)
