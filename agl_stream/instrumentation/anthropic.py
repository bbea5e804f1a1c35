"""Anthropic Messages API calls as LLM calls, token ids where the server sends them, tool-runner tools as tool spans.

``openinference-instrumentation-anthropic`` records each ``messages.create`` / ``messages.stream`` (and
``beta.``) call with the request and the whole message (streamed: the events accumulated by the SDK's own
``accumulate_event``); :mod:`~agl_stream.instrumentation.conventions` maps it onto upstream's
``openai.chat.completion`` span. The SDK's own call span (``anthropic.messages.create``, no content) is left as
it is: one LLM call, one LLM-call span.

**Token ids.** The Messages API has none. A server that serves a trainable policy behind it (a Messages front
on vLLM, a proxy) can send vLLM's: ``prompt_token_ids`` and ``token_ids`` as extra fields of the message;
streamed, ``prompt_token_ids`` on ``message_start``'s message and ``token_ids`` on the
``content_block_delta`` events (concatenated in order). The SDK keeps a message's extra fields, and
OpenInference records them with it; the SDK's stream accumulator drops the deltas' extras, so
:class:`AnthropicInstrumentor` wraps it to append their ``token_ids`` to the message it builds (which
``MessageStream.get_final_message()`` returns too). Nothing asks for them: the request has no such field,
and Anthropic's API refuses unknown ones, so the server decides (the agl proxy asks its backends itself).
Against api.anthropic.com the triplets carry the messages but no token ids.

**Tools.** Functions the SDK's tool runner executes (``@beta_tool``, ``client.beta.messages.tool_runner``)
are recorded as tool spans, the convention ``@agl_stream.air.tool`` uses (``<tool>.tool``, OpenInference
TOOL kind, ``tool.name``, the arguments as ``input.value``, the result as ``output.value``, an ERROR status
when the tool raised), so AIR's rules and upstream's adapters see them.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
from typing import Any, Callable, Collection, Optional

from wrapt import wrap_function_wrapper

from agl_stream.instrumentation._extension import OpenInferenceExtension

logger = logging.getLogger(__name__)

KIND = "openinference.span.kind"
#: the SDK's stream accumulators (stable and beta messages)
ACCUMULATORS = ("anthropic.lib.streaming._messages", "anthropic.lib.streaming._beta_messages")
TOOLS_MODULE = "anthropic.lib.tools._beta_functions"
TOOL_CLASSES = ("BetaFunctionTool", "BetaAsyncFunctionTool")
_MAX_TEXT = 64 * 1024  # a tool output beyond this is cut in the span, as @air.tool does


def _extra_ids(obj: Any, key: str) -> Optional[list[int]]:
    value = obj.get(key) if isinstance(obj, dict) else (getattr(obj, "model_extra", None) or {}).get(key)
    return value if isinstance(value, list) and all(type(v) is int for v in value) else None


def _keeping_token_ids(accumulate: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK's ``accumulate_event``, also appending a ``content_block_delta``'s ``token_ids`` to the message."""

    @functools.wraps(accumulate)
    def accumulate_event(*args: Any, **kwargs: Any) -> Any:
        snapshot = accumulate(*args, **kwargs)
        event = kwargs.get("event", args[0] if args else None)
        kind = event.get("type") if isinstance(event, dict) else getattr(event, "type", None)
        ids = _extra_ids(event, "token_ids") if kind == "content_block_delta" else None
        if ids:
            try:
                setattr(snapshot, "token_ids", (_extra_ids(snapshot, "token_ids") or []) + ids)
            except Exception:  # recording must never break the agent's stream
                logger.debug("could not keep a stream event's token ids", exc_info=True)
        return snapshot

    accumulate_event._agl_original = accumulate  # type: ignore[attr-defined]
    return accumulate_event


def _dumps(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"... ({len(text)} characters)"


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else repr(value)


class _ToolSpans:
    """Tool spans around ``BetaFunctionTool.call`` / ``BetaAsyncFunctionTool.call`` (see the module doc)."""

    def __init__(self) -> None:
        self.tracer: Any = None  # set while instrumented

    def _start(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = str(getattr(instance, "name", "tool"))
        arguments = args[0] if args else kwargs.get("input")
        attributes = {KIND: "TOOL", "tool.name": name, "input.value": _dumps(arguments),
                      "input.mime_type": "application/json", "agentops.span.kind": "tool"}  # fmt: skip
        return self.tracer.start_as_current_span(f"{name}.tool", attributes=attributes, record_exception=False,
                                                 set_status_on_exception=False)  # fmt: skip

    @staticmethod
    def _failed(span: Any, exc: BaseException) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1024]))

    def sync_call(self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:  # fmt: skip
        if self.tracer is None:
            return wrapped(*args, **kwargs)
        with self._start(instance, args, kwargs) as span:
            try:
                result = wrapped(*args, **kwargs)
            except Exception as exc:
                self._failed(span, exc)
                raise
            span.set_attribute("output.value", _dumps(result))
            return result

    async def async_call(self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:  # fmt: skip
        if self.tracer is None:
            return await wrapped(*args, **kwargs)
        with self._start(instance, args, kwargs) as span:
            try:
                result = await wrapped(*args, **kwargs)
            except Exception as exc:
                self._failed(span, exc)
                raise
            span.set_attribute("output.value", _dumps(result))
            return result


_TOOLS = _ToolSpans()


class AnthropicInstrumentor(OpenInferenceExtension):
    """OpenInference's Anthropic instrumentation plus token ids in streams and tool spans (see the module doc).

    The registry (:mod:`agl_stream.instrumentation`) instruments it when the agent imports ``anthropic``."""

    library = "anthropic"
    openinference = "openinference.instrumentation.anthropic:AnthropicInstrumentor"
    _tools_wrapped = False

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("anthropic >= 0.40",)

    def _after(self, provider: Any) -> None:
        for module_name in ACCUMULATORS:
            module = _optional_module(module_name)
            if module is not None and not hasattr(module.accumulate_event, "_agl_original"):
                module.accumulate_event = _keeping_token_ids(module.accumulate_event)
        _TOOLS.tracer = provider.get_tracer(__name__)
        if not AnthropicInstrumentor._tools_wrapped and _optional_module(TOOLS_MODULE) is not None:
            wrap_function_wrapper(TOOLS_MODULE, "BetaFunctionTool.call", _TOOLS.sync_call)
            wrap_function_wrapper(TOOLS_MODULE, "BetaAsyncFunctionTool.call", _TOOLS.async_call)
            AnthropicInstrumentor._tools_wrapped = True

    def _retract(self) -> None:
        from opentelemetry.instrumentation.utils import unwrap

        for module_name in ACCUMULATORS:
            module = _optional_module(module_name)
            original = getattr(getattr(module, "accumulate_event", None), "_agl_original", None)
            if original is not None:
                module.accumulate_event = original  # type: ignore[union-attr]
        _TOOLS.tracer = None
        if AnthropicInstrumentor._tools_wrapped:
            tools = importlib.import_module(TOOLS_MODULE)
            for class_name in TOOL_CLASSES:
                unwrap(getattr(tools, class_name), "call")
            AnthropicInstrumentor._tools_wrapped = False


def _optional_module(name: str) -> Any:
    """The module, or None where this SDK version has no such module."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
