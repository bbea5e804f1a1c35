"""``agl_stream.trainer``: the ``Trainer`` facade, laid out as upstream's ``agentlightning.trainer``
package (the implementation is :mod:`agl_stream.trainer.trainer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.trainer.trainer import ComponentSpec, Trainer, agent_path

__all__ = ["ComponentSpec", "Trainer", "agent_path"]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
