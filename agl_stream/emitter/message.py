"""Upstream's ``agentlightning.emitter.message`` path: the message emitter and its reader (defined in
:mod:`agl_stream.emitter.annotation` and :mod:`agl_stream.emitter.readers`)."""

from __future__ import annotations

from agl_stream.emitter.annotation import emit_message
from agl_stream.emitter.readers import get_message_value

__all__ = ["emit_message", "get_message_value"]
