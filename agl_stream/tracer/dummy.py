"""Upstream's ``agentlightning.tracer.dummy`` path: ``DummyTracer`` (defined in
:mod:`agl_stream.tracer.compat`); its recording context is refused with the replacement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.tracer.compat import DummyTracer

__all__ = ["DummyTracer"]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
