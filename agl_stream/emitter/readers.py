"""Read back what ``emit_message`` and ``emit_object`` recorded (upstream's ``get_*_value``)."""

from __future__ import annotations

import json
from typing import Any, Optional

from agl_stream.semconv import LightningSpanAttributes


def _attributes(span: Any) -> dict[str, Any]:
    return dict(getattr(span, "attributes", None) or {})


def get_message_value(span: Any) -> Optional[str]:
    """The message body of a message span, None when the span has none."""
    attributes = _attributes(span)
    key = LightningSpanAttributes.MESSAGE_BODY.value
    if key not in attributes:
        return None
    message = attributes[key]
    if not isinstance(message, str):
        raise TypeError(f"message must be a string, got {type(message).__name__}")
    return message


_LITERALS = {"str": str, "int": int, "float": float, "bool": lambda text: str(text).lower() == "true"}


def get_object_value(span: Any) -> Any:
    """The object of an object span (decoded from its JSON or literal attribute), None when it has none."""
    attributes = _attributes(span)
    if LightningSpanAttributes.OBJECT_JSON.value in attributes:
        try:
            return json.loads(attributes[LightningSpanAttributes.OBJECT_JSON.value])
        except (TypeError, ValueError) as exc:
            raise RuntimeError("the object span's JSON does not decode") from exc
    if LightningSpanAttributes.OBJECT_LITERAL.value in attributes:
        literal = attributes[LightningSpanAttributes.OBJECT_LITERAL.value]
        kind = attributes.get(LightningSpanAttributes.OBJECT_TYPE.value, "str")
        if kind == "NoneType":
            return None
        if kind not in _LITERALS:
            raise ValueError(f"unknown object literal type {kind!r}")
        return _LITERALS[kind](literal)
    return None
