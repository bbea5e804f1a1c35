"""Inference engines the agents call, behind one protocol (:class:`agl_stream_trainer.engines.base.InferenceEngine`)."""

from agl_stream_trainer.engines.base import InferenceEngine, Weights

__all__ = ["InferenceEngine", "Weights"]
