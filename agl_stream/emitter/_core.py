"""What every emitter shares: building a span from core fields and recording it in the active attempt."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from agl_stream.tracer.attributes import flatten_attributes
from agl_stream.tracer.base import get_active_tracer
from agl_stream.types import SpanCoreFields, TraceStatus


def no_tracer_error(kind: str) -> RuntimeError:
    return RuntimeError(
        f"No active tracer found. Cannot emit {kind} span. "
        "Emit inside a rollout run by the agl-stream runner (or a tracer's trace_context), or pass propagate=False."
    )


def emit_core(
    name: str,
    attributes: Mapping[str, Any],
    *,
    kind: str,
    propagate: bool,
    extra: Optional[Mapping[str, Any]] = None,
    status: Optional[TraceStatus] = None,
) -> SpanCoreFields:
    """Build a complete span (start = end = now) and, with ``propagate``, record it via the active tracer."""
    import time

    now = time.time()
    flat = flatten_attributes(dict(attributes))
    if extra:
        flat.update(flatten_attributes(dict(extra)))
    core = SpanCoreFields(name=name, attributes=flat, status=status or TraceStatus(), start_time=now, end_time=now)
    if propagate:
        tracer = get_active_tracer()
        if tracer is None:
            raise no_tracer_error(kind)
        tracer.create_span(core)
    return core
