"""Inference engines the agents call, behind one protocol (:class:`trainer.engines.base.InferenceEngine`)."""

from trainer.engines.base import InferenceEngine, Weights

__all__ = ["InferenceEngine", "Weights"]
