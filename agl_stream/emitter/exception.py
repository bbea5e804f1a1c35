"""Upstream's ``agentlightning.emitter.exception`` path (agl-stream emits every small span from
:mod:`agl_stream.emitter.annotation`)."""

from __future__ import annotations

from agl_stream.emitter.annotation import emit_exception

__all__ = ["emit_exception"]
