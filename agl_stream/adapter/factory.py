"""Build an adapter from a name and options, so services and CLIs can configure it with plain strings.

Spec syntax: ``NAME`` or ``NAME:key=value,key=value`` where NAME is a short alias (``tracer``,
``llm_proxy``, ``messages``), an upstream class name, or ``package.module:attribute`` of a custom
adapter class. Values are parsed as JSON when possible (``true``, ``3``, ``null``), else kept as text.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Mapping, Optional

from agl_stream.adapter.base import TraceAdapter
from agl_stream.adapter.messages import TraceToMessages
from agl_stream.adapter.proxy import LlmProxyTraceToTriplet
from agl_stream.adapter.triplet import TracerTraceToTriplet

ADAPTERS: dict[str, type[TraceAdapter[Any]]] = {
    "tracer": TracerTraceToTriplet,
    "TracerTraceToTriplet": TracerTraceToTriplet,
    "llm_proxy": LlmProxyTraceToTriplet,
    "LlmProxyTraceToTriplet": LlmProxyTraceToTriplet,
    "messages": TraceToMessages,
    "TraceToMessages": TraceToMessages,
}


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_adapter_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"tracer:agent_match=write,repair_hierarchy=false"`` -> ``("tracer", {...})``."""
    spec = spec.strip()
    if not spec:
        raise ValueError("empty adapter spec")
    name, options_text = spec, ""
    head, sep, tail = spec.partition(":")
    if sep and head in ADAPTERS:  # "alias:options"
        name, options_text = head, tail
    elif sep and ":" in tail:  # "module:attr:key=value"
        attr, _, options_text = tail.partition(":")
        name = f"{head}:{attr}"
    elif sep and ("=" in tail or not tail):  # "alias:key=value" ("module:attr" has no '=')
        name, options_text = head, tail
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in options_text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"adapter option {part!r} is not key=value (spec {spec!r})")
        options[key.strip()] = _value(value.strip())
    return name, options


def build_adapter(spec: str, options: Optional[Mapping[str, Any]] = None) -> TraceAdapter[Any]:
    """Instantiate the adapter a spec names; explicit ``options`` override those in the spec."""
    name, spec_options = parse_adapter_spec(spec)
    spec_options.update(options or {})
    cls = ADAPTERS.get(name)
    if cls is None:
        if ":" not in name:
            raise ValueError(f"unknown adapter {name!r}; known: {sorted(ADAPTERS)} or 'package.module:Class'")
        module_name, _, attr = name.partition(":")
        cls = getattr(importlib.import_module(module_name), attr)
    try:
        adapter = cls(**spec_options)
    except TypeError as exc:
        raise ValueError(f"bad options for adapter {name!r}: {exc}") from None
    if not isinstance(adapter, TraceAdapter):
        raise TypeError(f"{name!r} is not a TraceAdapter")
    return adapter
