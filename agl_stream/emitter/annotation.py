"""Annotations, messages, objects and exceptions: small spans that describe what an agent did."""

from __future__ import annotations

import json
import traceback
from typing import TYPE_CHECKING, Any, Mapping, Optional

from agl_stream._porting import module_getattr
from agl_stream.emitter._core import emit_core
from agl_stream.semconv import AGL_ANNOTATION, AGL_EXCEPTION, AGL_MESSAGE, AGL_OBJECT, LightningSpanAttributes
from agl_stream.types import SpanCoreFields, TraceStatus


def emit_annotation(annotation: Mapping[str, Any], *, propagate: bool = True) -> SpanCoreFields:
    """Attach free-form attributes (tags, links, metadata) as an ``agentlightning.annotation`` span."""
    if not isinstance(annotation, Mapping):
        raise TypeError(f"emit_annotation expects a dict, not {type(annotation).__name__}")
    return emit_core(AGL_ANNOTATION, annotation, kind="annotation", propagate=propagate)


def emit_message(message: str, *, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> SpanCoreFields:
    if not isinstance(message, str):
        raise TypeError(f"emit_message expects a str, not {type(message).__name__}")
    return emit_core(
        AGL_MESSAGE, {LightningSpanAttributes.MESSAGE_BODY.value: message}, kind="message", propagate=propagate, extra=attributes
    )


def _object_json(obj: Any) -> str:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        obj = dump(mode="json")
    try:
        return json.dumps(obj, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"emit_object cannot serialize {type(obj).__name__} to JSON: {exc}") from None


def emit_object(obj: Any, *, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> SpanCoreFields:
    """Record a value: literals as ``agentlightning.object.literal``, anything else as JSON."""
    attrs: dict[str, Any] = {LightningSpanAttributes.OBJECT_TYPE.value: type(obj).__name__}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        attrs[LightningSpanAttributes.OBJECT_LITERAL.value] = str(obj) if obj is None else obj
    else:
        attrs[LightningSpanAttributes.OBJECT_JSON.value] = _object_json(obj)
    return emit_core(AGL_OBJECT, attrs, kind="object", propagate=propagate, extra=attributes)


def exception_attributes(exception: BaseException) -> dict[str, Any]:
    """OTel's exception attribute keys (``exception.type|message|escaped|stacktrace``)."""
    return {
        "exception.type": type(exception).__qualname__,
        "exception.message": str(exception),
        "exception.escaped": True,
        "exception.stacktrace": "".join(traceback.format_exception(type(exception), exception, exception.__traceback__)),
    }


def emit_exception(
    exception: BaseException, *, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True
) -> SpanCoreFields:
    if not isinstance(exception, BaseException):
        raise TypeError(f"emit_exception expects an exception, not {type(exception).__name__}")
    status = TraceStatus(status_code="ERROR", description=f"{type(exception).__name__}: {exception}")
    return emit_core(
        AGL_EXCEPTION, exception_attributes(exception), kind="exception", propagate=propagate, extra=attributes, status=status
    )


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
