"""Attribute values in the shape OpenTelemetry accepts: flat dotted keys, primitives or homogeneous lists.

Emitters take arbitrary Python values (nested dicts, pydantic models, lists of dicts); OTel only
stores ``str | bool | int | float`` and sequences of one of those. Nested mappings become dotted
keys (upstream's flattening), anything else that OTel cannot hold becomes its JSON text.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

Primitive = (str, bool, int, float)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=_default, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return repr(value)


def to_attribute_value(value: Any) -> Any:
    """One value as OTel can store it (lists stay lists only when homogeneous primitives)."""
    if isinstance(value, Primitive):
        return value
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value) or all(isinstance(v, bool) for v in value):
            return list(value)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            if all(isinstance(v, int) for v in value) or all(isinstance(v, float) for v in value):
                return list(value)
            return [float(v) for v in value]
        return _json(value)
    return _json(value)


def flatten_attributes(attributes: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; None values are left out (OTel rejects them)."""
    flat: dict[str, Any] = {}
    for key, value in attributes.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if value is None:
            continue
        dump = getattr(value, "model_dump", None)
        if callable(dump) and not isinstance(value, type):
            value = dump(mode="json")
        if isinstance(value, Mapping):
            if value:
                flat.update(flatten_attributes(value, full))
            else:
                flat[full] = "{}"
            continue
        flat[full] = to_attribute_value(value)
    return flat


def otel_value_to_python(value: Any) -> Any:
    """OTel keeps sequences as tuples; records carry JSON lists."""
    if isinstance(value, tuple):
        return list(value)
    return value
