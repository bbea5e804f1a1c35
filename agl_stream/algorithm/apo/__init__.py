"""Upstream's ``agentlightning.algorithm.apo`` path: ``APO``, loaded from the trainer service package on first use."""

from __future__ import annotations

from agl_stream._porting import module_getattr

# no static import: agl_stream never imports a service package (tests/test_service_boundaries.py)
__getattr__ = module_getattr(__name__, lazy={"APO": "agl_stream_trainer.algorithms.apo"})
