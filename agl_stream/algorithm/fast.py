"""Upstream's ``agentlightning.algorithm.fast`` path: the quick algorithms (defined in
:mod:`agl_stream.algorithm.baseline`)."""

from __future__ import annotations

from agl_stream.algorithm.baseline import Baseline, FastAlgorithm

__all__ = ["Baseline", "FastAlgorithm"]
