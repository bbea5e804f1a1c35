"""Upstream's ``agentlightning.algorithm.apo.apo`` path: ``APO`` (loaded on first use); upstream's APO
internals (prompt files, versioned templates, rollout result type) are refused with the replacement."""

from __future__ import annotations

from agl_stream._porting import module_getattr

# no static import: agl_stream never imports a service package (tests/test_service_boundaries.py)
__getattr__ = module_getattr(
    __name__,
    lazy={"APO": "agl_stream_trainer.algorithms.apo"},
    replaced=["APPLY_EDIT_PROMPT_FILES", "GRADIENT_PROMPT_FILES", "RolloutResultForAPO", "VersionedPromptTemplate"],
)
