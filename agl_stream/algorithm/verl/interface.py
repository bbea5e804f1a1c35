"""Upstream's ``agentlightning.algorithm.verl.interface`` path: ``VERL`` (see :mod:`agl_stream.algorithm.verl`)."""

from __future__ import annotations

from agl_stream._porting import module_getattr

# no static import: agl_stream never imports a service package (tests/test_service_boundaries.py)
__getattr__ = module_getattr(__name__, lazy={"VERL": "agl_stream_trainer.rl"})
