"""``auto_instrument``: switch on, for this process, the tracing AIR relies on.

* **LLM calls** are traced by agl-stream's tracer through the maintained OpenInference OpenAI
  instrumentation (:mod:`agl_stream.instrumentation`, armed when a runner starts, activated when the
  agent imports ``openai``). ``trace_llm_calls=False`` turns it off in this process (an active
  instrumentation is removed) and, through ``AGL_INSTRUMENT_OPENAI=0``, in the runner processes
  started after the call; ``True`` undoes that (it never overrides an operator's
  ``AGL_INSTRUMENT_OPENAI=0``).
* **Tool calls**: ``@air.tool`` spans, and the rules on the TOOL spans framework instrumentations
  record (OpenInference's ``openinference.span.kind = TOOL``, e.g. LangChain tools): those fire the
  same rules as decorated tools. ``trace_tool_calls=False`` records no tool span (decorated tools
  still fire their rules).
* **Trace context**: work an attempt hands to a thread pool (``ThreadPoolExecutor.submit``, hence
  ``loop.run_in_executor``, which unlike ``asyncio.to_thread`` does not carry context variables)
  runs in a copy of the submitter's context, so the tools and LLM calls made there still belong to
  the rollout (its spans, its rewards). Submissions outside an attempt are left untouched.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, Optional

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from agl_stream.air import record
from agl_stream.air.rules import CodeExecution, ToolCall, events_for
from agl_stream.config import Settings, env_name
from agl_stream.instrumentation.conventions import json_or_none

logger = logging.getLogger(__name__)

LLM_SWITCH = env_name("instrument_openai")
KIND = "openinference.span.kind"
_UNSET = object()
_LOCK = threading.Lock()
_switch_before: Any = _UNSET  # AGL_INSTRUMENT_OPENAI before trace_llm_calls=False set it (None: unset)
_original_submit: Optional[Callable[..., Any]] = None


class RecordedToolError(Exception):
    """A framework tool's failure, as its span recorded it (the exception object itself stayed in the framework)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name

    def __str__(self) -> str:
        return f"{self.type_name}: {self.args[0]}" if self.args and self.args[0] else self.type_name


class FrameworkToolRules(SpanProcessor):
    """Fires the AIR rules when a TOOL span that a framework instrumentation recorded ends in an attempt.

    Installed after agl-stream's own span processor, so the tool span is recorded before the rewards
    its rules give. Spans of ``@air.tool`` are left to the decorator."""

    def __init__(self) -> None:
        self.enabled = False

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if not self.enabled:
            return
        attributes = span.attributes or {}
        if attributes.get(KIND) != "TOOL" or attributes.get(record.AIR_TOOL):
            return
        from agl_stream.tracer.base import get_active_tracer

        if get_active_tracer() is None:  # ended outside an attempt's context: no rollout to reward
            return
        try:
            call = tool_call_from_span(span)
        except Exception:
            logger.exception("AIR could not read the tool span %s", span.name)
            return
        record.apply_rules(call, events_for(call, bool(attributes.get(record.CODE_EXECUTION))))

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


FRAMEWORK_TOOLS = FrameworkToolRules()
_framework_tools_on: Any = None  # the provider FRAMEWORK_TOOLS was added to


def tool_call_from_span(span: ReadableSpan) -> ToolCall:
    """The :class:`ToolCall` a framework's TOOL span describes (arguments from ``input.value`` JSON)."""
    attributes: Mapping[str, Any] = span.attributes or {}
    name = str(attributes.get("tool.name") or span.name)
    raw_input = attributes.get("input.value")
    parsed = json_or_none(raw_input)
    args = parsed if isinstance(parsed, dict) else ({} if raw_input is None else {"input": raw_input})
    error: Optional[BaseException] = None
    if span.status is not None and not span.status.is_ok and span.status.status_code.name == "ERROR":
        event = next((e for e in span.events if e.name == "exception"), None)
        event_attrs: Mapping[str, Any] = (event.attributes or {}) if event is not None else {}
        message = event_attrs.get("exception.message") or span.status.description or ""
        error = RecordedToolError(str(event_attrs.get("exception.type") or "ToolError"), str(message))
    start = (span.start_time or 0) / 1e9
    end = (span.end_time or span.start_time or 0) / 1e9
    common: dict[str, Any] = dict(tool_name=name, args=args, result=None if error else attributes.get("output.value"),
                                  error=error, duration=max(0.0, end - start), started_at=start,
                                  span_id=format(span.context.span_id, "016x") if span.context else None)  # fmt: skip
    if attributes.get(record.CODE_EXECUTION):
        return CodeExecution(**common, code=str(args.get("code", raw_input or "")))
    return ToolCall(**common)


def auto_instrument(
    trace_llm_calls: bool = True, trace_tool_calls: bool = True, trace_context: bool = True
) -> record.AirSettings:
    """Switch the tracing AIR relies on on or off for this process (see the module doc); returns what is on.

    Call it where the agent is defined (module level, so runner processes that import the agent's
    module run it too) or before the trainer starts its runners (they inherit the environment)."""
    with _LOCK:
        _switch_llm_tracing(trace_llm_calls)
        _switch_tool_tracing(trace_tool_calls)
        _switch_context_propagation(trace_context)
        return dataclasses.replace(record.SETTINGS)


def _switch_llm_tracing(on: bool) -> None:
    global _switch_before
    from agl_stream import instrumentation

    if not on:
        if _switch_before is _UNSET:
            _switch_before = os.environ.get(LLM_SWITCH)
        os.environ[LLM_SWITCH] = "0"
        instrumentation.deactivate("openai")
        if "openai" in sys.modules:
            from agl_stream.instrumentation.openai import stop_requesting_token_ids

            stop_requesting_token_ids()
    elif _switch_before is not _UNSET:  # undo our own switch, not the operator's
        if _switch_before is None:
            os.environ.pop(LLM_SWITCH, None)
        else:
            os.environ[LLM_SWITCH] = _switch_before
        _switch_before = _UNSET
        provider = _agl_provider()
        if provider is not None:  # the tracer already armed the instrumentations: arm it again
            instrumentation.instrument_installed(provider)
    settings = Settings.from_env()
    record.SETTINGS.trace_llm_calls = settings.instrument and settings.instrument_openai


def _agl_provider() -> Any:
    """The tracer provider agl-stream's tracer captures, once a tracer set it up in this process."""
    otel_module = sys.modules.get("agl_stream.tracer.otel")
    return getattr(otel_module, "_installed_on", None) if otel_module is not None else None


def _switch_tool_tracing(on: bool) -> None:
    global _framework_tools_on
    record.SETTINGS.trace_tool_calls = on
    if on:
        from agl_stream.tracer.otel import install_global_processor

        provider = install_global_processor()  # the one the runner's tracer uses too; idempotent
        if _framework_tools_on is not provider:
            provider.add_span_processor(FRAMEWORK_TOOLS)
            _framework_tools_on = provider
    FRAMEWORK_TOOLS.enabled = on


def _switch_context_propagation(on: bool) -> None:
    global _original_submit
    record.SETTINGS.trace_context = on
    if on and _original_submit is None:
        original = ThreadPoolExecutor.submit

        @functools.wraps(original)
        def submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Future[Any]":
            from agl_stream.tracer.base import get_active_attempt

            if get_active_attempt() is None:
                return original(self, fn, *args, **kwargs)
            return original(self, contextvars.copy_context().run, fn, *args, **kwargs)

        ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        _original_submit = original
    elif not on and _original_submit is not None:
        ThreadPoolExecutor.submit = _original_submit  # type: ignore[method-assign]
        _original_submit = None
