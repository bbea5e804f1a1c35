"""Upstream's ``agentlightning.emitter.object`` path: the object emitter and its reader (defined in
:mod:`agl_stream.emitter.annotation` and :mod:`agl_stream.emitter.readers`). Upstream's
``encode_object`` is refused: ``emit_object(obj, propagate=False).attributes`` gives the attributes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.emitter.annotation import emit_object
from agl_stream.emitter.readers import get_object_value

__all__ = ["emit_object", "get_object_value"]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
