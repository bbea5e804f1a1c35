"""``@air.tool``: trace a hand-written tool and turn its calls into intermediate rewards.

Each call is recorded as a tool span (OpenInference's TOOL conventions, which the maintained
framework instrumentations use for their tools too, with upstream's AgentOps-style name
``<tool>.tool`` and ``agentops.span.kind = "tool"``): ``tool.name``, ``input.value`` (the arguments
by name, JSON), ``output.value``; a call that raises gets an ERROR status and an ``exception``
event, and the exception propagates unchanged. After the span ends, the rules registered for the
call's events run (:mod:`agl_stream.air.rules`) and their rewards are emitted right after the span
(:mod:`agl_stream.air.record`). Outside a rollout the tool just runs (nothing to record into).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, TypeVar, overload

from agl_stream.air import record
from agl_stream.air.rules import CodeExecution, ToolCall, events_for

F = TypeVar("F", bound=Callable[..., Any])
logger = logging.getLogger(__name__)

KIND = "openinference.span.kind"
_MAX_TEXT = 64 * 1024  # a tool output beyond this is cut in the span (the rules still see all of it)


@dataclass(frozen=True)
class ToolSpec:
    """How one decorated function is recorded."""

    name: str
    signature: Optional[inspect.Signature]
    code_execution: bool = False
    code_arg: Optional[str] = None
    description: Optional[str] = None

    @property
    def span_name(self) -> str:
        return f"{self.name}.tool"

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Mapping[str, Any]:
        """The call's arguments by parameter name, defaults included (``self`` / ``cls`` left out); the raw
        ones when they do not fit the signature (the function then raises its own TypeError)."""
        if self.signature is not None:
            try:
                bound = self.signature.bind_partial(*args, **kwargs)
            except TypeError:
                pass
            else:
                bound.apply_defaults()
                return MappingProxyType({k: v for k, v in bound.arguments.items() if k not in ("self", "cls")})
        return MappingProxyType({"args": list(args), "kwargs": dict(kwargs)})

    def attributes(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            KIND: "TOOL",
            "tool.name": self.name,
            "input.value": _cut(_json(dict(arguments))),
            "input.mime_type": "application/json",
            "agentops.span.kind": "tool",
            record.AIR_TOOL: True,
        }
        if self.description:
            attrs["tool.description"] = self.description
        if self.code_execution:
            attrs[record.CODE_EXECUTION] = True
        return attrs


class _Run:
    """One call: its span (when an attempt is recorded), its timing, then its rules."""

    def __init__(self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.spec = spec
        self.arguments = spec.bind(args, kwargs)
        self.started_at = time.time()
        self._t0 = time.perf_counter()
        self._otel: Any = None
        self._tracer: Any = None
        self._attributes: dict[str, Any] = {}
        if record.SETTINGS.trace_tool_calls:
            try:
                self._start_span()
            except Exception:  # the tool runs untraced rather than not at all
                logger.exception("AIR could not trace a %s call", spec.name)
                self._otel = self._tracer = None

    def _start_span(self) -> None:
        from agl_stream.tracer.base import get_active_tracer

        self._tracer = get_active_tracer()
        if self._tracer is None:
            return
        self._attributes = self.spec.attributes(self.arguments)
        from agl_stream.tracer.otel import INSTRUMENTATION_NAME, OtelTracer

        if isinstance(self._tracer, OtelTracer):  # a real span: what the tool itself traces nests under it
            from opentelemetry import trace as otel_trace

            self._otel = otel_trace.get_tracer(INSTRUMENTATION_NAME).start_span(
                self.spec.span_name, attributes=self._attributes, start_time=int(self.started_at * 1e9)
            )

    def current(self) -> AbstractContextManager[Any]:
        if self._otel is None:
            return nullcontext()
        from opentelemetry import trace as otel_trace

        return otel_trace.use_span(self._otel, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def finish(self, result: Any = None, error: Optional[BaseException] = None) -> None:
        """End the span, then (unless the call was interrupted, e.g. cancelled) run the rules."""
        duration = time.perf_counter() - self._t0
        try:
            span_id = self._end_span(result, error, duration)
        except Exception:  # recording must never replace what the tool returned or raised
            logger.exception("AIR could not record a %s call", self.spec.name)
            span_id = None
        if error is not None and not isinstance(error, Exception):
            return
        common: dict[str, Any] = dict(tool_name=self.spec.name, args=self.arguments, result=result, error=error,
                                      duration=duration, started_at=self.started_at, span_id=span_id)  # fmt: skip
        call: ToolCall
        if self.spec.code_execution:
            code = self.arguments.get(self.spec.code_arg) if self.spec.code_arg else None
            call = CodeExecution(**common, code="" if code is None else str(code))
        else:
            call = ToolCall(**common)
        record.apply_rules(call, events_for(call, self.spec.code_execution))

    def _end_span(self, result: Any, error: Optional[BaseException], duration: float) -> Optional[str]:
        if self._tracer is None:
            return None
        from agl_stream.emitter.annotation import exception_attributes

        output: dict[str, Any] = {}
        if error is None and result is not None:
            text = result if isinstance(result, str) else _json(result)
            mime = "text/plain" if isinstance(result, str) else "application/json"
            output = {"output.value": _cut(text), "output.mime_type": mime}
        if self._otel is not None:
            from opentelemetry.trace import Status, StatusCode

            span = self._otel
            span.set_attributes(output)
            if error is not None:
                span.add_event("exception", exception_attributes(error))
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end(end_time=int((self.started_at + duration) * 1e9))
            return format(span.get_span_context().span_id, "016x")
        from agl_stream.types import SpanCoreFields, TraceStatus

        status = TraceStatus()
        if error is not None:
            status = TraceStatus(status_code="ERROR", description=f"{type(error).__name__}: {error}")
        attributes = {**self._attributes, **output}
        if error is not None:
            attributes.update(exception_attributes(error))
        core = SpanCoreFields(name=self.spec.span_name, attributes=attributes, status=status,
                              start_time=self.started_at, end_time=self.started_at + duration)  # fmt: skip
        self._tracer.create_span(core)
        return None


@overload
def tool(func: F) -> F: ...


@overload
def tool(
    func: None = None,
    *,
    name: Optional[str] = None,
    code_execution: bool = False,
    code_arg: Optional[str] = None,
    description: Optional[str] = None,
) -> Callable[[F], F]: ...


def tool(
    func: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    code_execution: bool = False,
    code_arg: Optional[str] = None,
    description: Optional[str] = None,
) -> Any:
    """Trace a sync or async function as a tool whose calls feed the AIR rules.

    ``name``: the tool's name for spans and rule filters (default: the function's name).
    ``code_execution``: the tool runs code; its calls also fire ``on_code_execution`` rules, which
    get the code from the ``code_arg`` parameter (default: ``code`` if the function has it, else its
    first parameter) and the output from the return value (``stdout`` when a str).
    """
    if func is not None and not callable(func):
        raise TypeError("tool() takes a function; pass the options as keyword arguments")

    def decorate(function: F) -> F:
        try:
            signature: Optional[inspect.Signature] = inspect.signature(function)
        except (TypeError, ValueError):
            signature = None
        chosen = code_arg
        if code_execution and chosen is None and signature is not None:
            params = [p for p in signature.parameters if p not in ("self", "cls")]
            chosen = "code" if "code" in params else (params[0] if params else None)
        if code_arg is not None and signature is not None and code_arg not in signature.parameters:
            raise ValueError(f"code_arg={code_arg!r} is not a parameter of {getattr(function, '__name__', function)!r}")
        spec = ToolSpec(name or getattr(function, "__name__", "tool"), signature, code_execution, chosen, description)

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = _Run(spec, args, kwargs)
                try:
                    with run.current():
                        result = await function(*args, **kwargs)
                except BaseException as exc:
                    run.finish(error=exc)
                    raise
                run.finish(result=result)
                return result

            async_wrapper.air_tool = spec  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            run = _Run(spec, args, kwargs)
            try:
                with run.current():
                    result = function(*args, **kwargs)
            except BaseException as exc:
                run.finish(error=exc)
                raise
            run.finish(result=result)
            return result

        wrapper.air_tool = spec  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate(func) if func is not None else decorate


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=_default)
    except (TypeError, ValueError):
        return repr(value)


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else repr(value)


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"... ({len(text)} characters)"
