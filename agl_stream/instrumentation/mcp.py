"""MCP client tool calls as tool spans (``ClientSession.call_tool``), with trace context propagated to servers.

What exists already, and why it is not enough for training:

* ``openinference-instrumentation-mcp`` only **propagates trace context**: it wraps the transports
  (stdio, SSE, streamable HTTP) to inject W3C ``traceparent`` into each request's ``_meta`` and to
  attach it on the server side, so a server's own spans nest under the client's. It records no span.
* The MCP SDK (2.x) records a ``MCP send tools/call <tool>`` CLIENT span per request (method and
  request id, an error status only for JSON-RPC errors) and injects the context itself; it records
  neither the arguments nor the result, and a tool that fails returns ``isError`` without any error
  status on the client side.

Agent Lightning's pipeline reads a tool call from a tool span (OpenInference's TOOL conventions,
which ``@agl_stream.air.tool`` records too): ``tool.name``, the arguments as ``input.value``, the
result as ``output.value``, an ERROR status when the tool failed. :class:`MCPInstrumentor` keeps
OpenInference's propagation and adds that span around every ``ClientSession.call_tool`` (the
high-level ``mcp.Client`` calls it too), as the current span, so the SDK's request span (and, through
the propagated context, a traced server's spans) nest under it. ``air.auto_instrument()`` fires the
AIR rules on these spans as on any framework's TOOL span: ``isError`` results and raised errors are
failures.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Mapping, Optional

from wrapt import wrap_function_wrapper

logger = logging.getLogger(__name__)

KIND = "openinference.span.kind"
SESSION_MODULE = "mcp.client.session"
CALL_TOOL = "ClientSession.call_tool"
IS_ERROR = "mcp.tool.is_error"  # the result said isError (the status says so too; this keeps the raw flag)
_MAX_TEXT = 64 * 1024  # outputs beyond this are cut in the span, as @air.tool does


def tool_call_attributes(name: str, arguments: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """A tool span's attributes at the call (OpenInference TOOL + upstream's AgentOps kind + the MCP method)."""
    return {
        KIND: "TOOL",
        "tool.name": name,
        "input.value": _cut(_dumps(dict(arguments or {}))),
        "input.mime_type": "application/json",
        "agentops.span.kind": "tool",
        "mcp.method.name": "tools/call",
    }


def tool_result_attributes(result: Any) -> tuple[dict[str, Any], Optional[str]]:
    """(``output.*`` attributes, the error text when the result is an ``isError`` result) of a call's result.

    Text blocks are joined as plain text (what an agent hands its model); other content (images,
    resources) or other result types are recorded as their JSON."""
    content = getattr(result, "content", None)
    is_error = bool(getattr(result, "is_error", False) or getattr(result, "isError", False))
    if isinstance(content, list) and all(getattr(block, "type", None) == "text" for block in content):
        text, mime = "\n".join(str(block.text) for block in content), "text/plain"
    else:
        dump = getattr(result, "model_dump", None)
        text = _dumps(dump(mode="json", by_alias=True, exclude_none=True) if callable(dump) else result)
        mime = "application/json"
    attrs: dict[str, Any] = {"output.value": _cut(text), "output.mime_type": mime, IS_ERROR: is_error}
    return attrs, (text or "the tool returned isError") if is_error else None


async def _call_tool(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``ClientSession.call_tool`` inside a tool span (the span is current, so what the call traces nests under it)."""
    tracer = _STATE.tracer
    if tracer is None:
        return await wrapped(*args, **kwargs)
    from opentelemetry.trace import Status, StatusCode

    name = str(args[0] if args else kwargs.get("name", ""))
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    try:
        attributes = tool_call_attributes(name, arguments if isinstance(arguments, Mapping) else None)
    except Exception:  # recording must never stop the call
        logger.exception("could not describe the MCP call to %s", name)
        return await wrapped(*args, **kwargs)
    with tracer.start_as_current_span(f"{name}.tool", attributes=attributes, record_exception=False,
                                      set_status_on_exception=False) as span:  # fmt: skip
        try:
            result = await wrapped(*args, **kwargs)
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        except BaseException as exc:  # cancelled: no result, not the tool's failure
            span.set_attribute("mcp.tool.interrupted", type(exc).__name__)
            raise
        try:
            output, error = tool_result_attributes(result)
            span.set_attributes(output)
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error[:1024]))
        except Exception:
            logger.exception("could not record the result of the MCP call to %s", name)
        return result


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tracer: Any = None  # set while instrumented
        self.wrapped = False
        self.propagation: Any = None  # OpenInference's MCPInstrumentor, when installed


_STATE = _State()


class MCPInstrumentor:
    """Tool spans for ``ClientSession.call_tool`` plus OpenInference's context propagation (see the module doc).

    The registry (:mod:`agl_stream.instrumentation`) instruments it when the agent imports ``mcp``."""

    def instrument(self, tracer_provider: Any = None, **kwargs: Any) -> None:
        from opentelemetry import trace as otel_trace

        provider = tracer_provider or otel_trace.get_tracer_provider()
        with _STATE.lock:
            _STATE.tracer = provider.get_tracer(__name__)
            if not _STATE.wrapped:
                wrap_function_wrapper(SESSION_MODULE, CALL_TOOL, _call_tool)
                _STATE.wrapped = True
            if _STATE.propagation is None:
                try:
                    from openinference.instrumentation.mcp import MCPInstrumentor as Propagation
                except ImportError:  # the SDK (2.x) injects and extracts the context itself
                    logger.info("no openinference-instrumentation-mcp: MCP context propagation is the SDK's own")
                else:
                    _STATE.propagation = Propagation()
                    _STATE.propagation.instrument(tracer_provider=provider)

    def uninstrument(self, **kwargs: Any) -> None:
        import importlib

        from opentelemetry.instrumentation.utils import unwrap

        with _STATE.lock:
            _STATE.tracer = None
            if _STATE.wrapped:
                unwrap(importlib.import_module(SESSION_MODULE).ClientSession, "call_tool")
                _STATE.wrapped = False
            if _STATE.propagation is not None:
                _STATE.propagation.uninstrument()
                _STATE.propagation = None


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"... ({len(text)} characters)"
