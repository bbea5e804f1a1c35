"""Upstream's ``agentlightning.algorithm.verl`` path: ``VERL(config)``, agl-stream's RL trainer from a
verl config, loaded from the trainer service package (torch) on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
