"""``operation``: trace a unit of agent work as an ``agentlightning.operation`` span.

Works as a decorator (``@operation``, ``@operation(name=..., category="tool")``, sync or async
functions: inputs and output are recorded) and as a context manager
(``with operation(tool_name="x") as op: op.set_input(...); op.set_output(...)``, also ``async with``).
Spans started inside become its children. An exception marks the span ERROR and propagates.
"""

from __future__ import annotations

import functools
import inspect
from types import TracebackType
from typing import Any, Callable, Optional, TypeVar, overload

from opentelemetry import trace as otel_trace
from opentelemetry.trace import Status, StatusCode

from agl_stream.emitter._core import no_tracer_error
from agl_stream.emitter.annotation import exception_attributes
from agl_stream.semconv import AGL_OPERATION, LightningSpanAttributes
from agl_stream.tracer.attributes import flatten_attributes, to_attribute_value
from agl_stream.tracer.base import get_active_tracer
from agl_stream.tracer.otel import INSTRUMENTATION_NAME

F = TypeVar("F", bound=Callable[..., Any])

_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value


class OperationContext:
    """One operation span; usable once as a context manager, or as a decorator (one span per call)."""

    def __init__(self, name: Optional[str] = None, *, propagate: bool = True, attributes: Optional[dict[str, Any]] = None):
        self.name = name
        self.propagate = propagate
        self.attributes = dict(attributes or {})
        self._span: Any = None
        self._cm: Any = None

    # ---------------------------------------------------------------- recording

    def set_input(self, *args: Any, **kwargs: Any) -> None:
        values: dict[str, Any] = {str(i): v for i, v in enumerate(args)}
        values.update(kwargs)
        if self._span is not None:
            self._span.set_attributes(flatten_attributes(values, _INPUT))

    def set_output(self, output: Any) -> None:
        if self._span is None:
            return
        if isinstance(output, dict) or callable(getattr(output, "model_dump", None)):
            self._span.set_attributes(flatten_attributes({_OUTPUT: output}))
        elif output is not None:
            self._span.set_attribute(_OUTPUT, to_attribute_value(output))

    def set_attributes(self, **attributes: Any) -> None:
        if self._span is not None:
            self._span.set_attributes(flatten_attributes(attributes))

    # ---------------------------------------------------------------- context manager

    def __enter__(self) -> "OperationContext":
        if not self.propagate:
            return self
        if get_active_tracer() is None:
            raise no_tracer_error("operation")
        attrs = flatten_attributes(self.attributes)
        if self.name:
            attrs[LightningSpanAttributes.OPERATION_NAME.value] = self.name
        self._cm = otel_trace.get_tracer(INSTRUMENTATION_NAME).start_as_current_span(
            AGL_OPERATION, attributes=attrs, record_exception=False, set_status_on_exception=False
        )
        self._span = self._cm.__enter__()
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self._cm is None:
            return
        if exc is not None:
            self._span.add_event("exception", exception_attributes(exc))
            self._span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        cm, self._cm, self._span = self._cm, None, None
        cm.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> "OperationContext":
        return self.__enter__()

    async def __aexit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    # ---------------------------------------------------------------- decorator

    def __call__(self, func: F) -> F:
        name = self.name or getattr(func, "__name__", "operation")
        signature = inspect.signature(func)

        def fresh() -> "OperationContext":
            return OperationContext(name, propagate=self.propagate, attributes=self.attributes)

        def record_inputs(op: "OperationContext", args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            try:
                bound = signature.bind_partial(*args, **kwargs)
            except TypeError:  # the call itself is wrong; let the function raise its own error
                return
            op.set_input(**{k: v for k, v in bound.arguments.items() if k not in ("self", "cls")})

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with fresh() as op:
                    record_inputs(op, args, kwargs)
                    result = await func(*args, **kwargs)
                    op.set_output(result)
                    return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with fresh() as op:
                record_inputs(op, args, kwargs)
                result = func(*args, **kwargs)
                op.set_output(result)
                return result

        return wrapper  # type: ignore[return-value]


@overload
def operation(func: F) -> F: ...


@overload
def operation(
    func: None = None, *, name: Optional[str] = None, propagate: bool = True, **attributes: Any
) -> OperationContext: ...


def operation(
    func: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None, propagate: bool = True, **attributes: Any
) -> Any:
    """Decorate a function, or open an operation span as a context manager (see module docs)."""
    if func is not None:
        if not callable(func):
            raise TypeError("operation() takes a function; pass span attributes as keyword arguments")
        return OperationContext(name, propagate=propagate, attributes=attributes)(func)
    return OperationContext(name, propagate=propagate, attributes=attributes)
