"""Upstream's ``agentlightning.algorithm.decorator`` path: ``@algo`` and ``FunctionalAlgorithm``
(defined in :mod:`agl_stream.algorithm.base`). Upstream's typing aliases of the accepted function
signatures are refused: ``algo`` takes any sync or async function and injects parameters by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.algorithm.base import FunctionalAlgorithm, algo

__all__ = ["FunctionalAlgorithm", "algo"]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
