"""Agents: ``LitAgent`` and the ``@rollout`` decorator."""

from agl_stream.litagent.decorator import FunctionalLitAgent, llm_rollout, prompt_rollout, rollout
from agl_stream.litagent.litagent import LitAgent, RolloutRawResult

__all__ = ["FunctionalLitAgent", "LitAgent", "RolloutRawResult", "llm_rollout", "prompt_rollout", "rollout"]
