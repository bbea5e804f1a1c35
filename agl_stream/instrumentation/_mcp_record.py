"""One tool call, one TOOL span: a framework's tool span around an MCP call hands the record to the MCP span.

A framework that runs an MCP server's tools (AutoGen's ``McpWorkbench``, the OpenAI Agents SDK's
``MCPServerSse`` / ``MCPServerStdio``) records each call as its own TOOL span, and the call goes through
``ClientSession.call_tool``, which :mod:`agl_stream.instrumentation.mcp` records as a TOOL span too, inside the
framework's: two TOOL spans for one call, and AIR's rules would fire twice. As with LLM calls, the inner span is
the record: it has the call as the server answered it, and an ERROR status when the tool failed. When the MCP
span starts, the framework's TOOL span around it becomes a CHAIN span marked ``agl.tool.recorded_by`` (the MCP
span's id); other tools keep the framework's TOOL span.

OpenInference's tracer wraps each span (``OpenInferenceSpan``), keeps the span kind in the wrapper and sets it
again when the span ends, so the kind is changed through that wrapper too. The wrapper is what OpenInference
makes current while the tool runs, so it is the current span where the tool span's children start.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Optional

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

logger = logging.getLogger(__name__)

KIND = "openinference.span.kind"
#: set on a framework's TOOL span when an MCP tool span inside it records the call: that span's id
RECORDED_BY = "agl.tool.recorded_by"
MCP_SCOPE = "agl_stream.instrumentation.mcp"


def scope_of(span: Any) -> Optional[str]:
    """The name of the instrumentation scope (tracer) that started ``span``."""
    return getattr(getattr(span, "instrumentation_scope", None), "name", None)


class McpRecordsToolCalls(SpanProcessor):
    """Hands a framework's tool call to the MCP span inside it (see the module doc); subclasses name the framework's
    tracer scope in :attr:`tool_scope`.

    ``_enclosing`` maps each open span under a framework TOOL span (and that span itself) to the innermost such
    TOOL span, so an MCP tool span finds it however many spans lie between (AutoGen's ``execute_tool``);
    ``_wrappers`` holds OpenInference's wrapper of each open framework TOOL span, seen as its children start."""

    tool_scope: ClassVar[str]  # the instrumentation scope of the framework's TOOL spans
    framework: ClassVar[str]  # the framework's name, for the warning below

    def __init__(self) -> None:
        self.active = False
        self._enclosing: dict[int, Any] = {}
        self._wrappers: dict[int, Any] = {}
        self._warned_unwrapped = False

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if not self.active:
            return
        scope, kind = scope_of(span), (span.attributes or {}).get(KIND)
        parent_id = span.parent.span_id if span.parent is not None else None
        enclosing = self._enclosing.get(parent_id) if parent_id is not None else None
        if enclosing is not None and enclosing.context.span_id == parent_id and parent_id not in self._wrappers:
            current = otel_trace.get_current_span(parent_context)
            if current is not enclosing and current.get_span_context().span_id == parent_id:
                self._wrappers[parent_id] = current
        if scope == self.tool_scope and kind == "TOOL":
            enclosing = span
        elif scope == MCP_SCOPE and kind == "TOOL" and enclosing is not None and enclosing.is_recording():
            enclosing.set_attribute(KIND, "CHAIN")
            enclosing.set_attribute(RECORDED_BY, format(span.context.span_id, "016x"))
            wrapper = self._wrappers.get(enclosing.context.span_id)
            if wrapper is not None:
                wrapper.set_attribute(KIND, "CHAIN")  # the kind OpenInference sets again when the span ends
            elif not self._warned_unwrapped:
                self._warned_unwrapped = True
                logger.warning("no OpenInference wrapper seen for the %s tool span %r: it may end as a TOOL span "
                               "beside the MCP call's", self.framework, enclosing.name)  # fmt: skip
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
