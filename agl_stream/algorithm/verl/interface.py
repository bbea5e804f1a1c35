"""Upstream's ``agentlightning.algorithm.verl.interface`` path: ``VERL`` (see :mod:`agl_stream.algorithm.verl`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
