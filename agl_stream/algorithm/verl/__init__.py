"""Upstream's ``agentlightning.algorithm.verl`` path: ``VERL(config)``, agl-stream's RL trainer from a
verl config, loaded from the trainer service package (torch) on first use."""

from __future__ import annotations

from agl_stream._porting import module_getattr

# no static import: agl_stream never imports a service package (tests/test_service_boundaries.py)
__getattr__ = module_getattr(__name__, lazy={"VERL": "agl_stream_trainer.rl"})
