"""Training data: (prompt, response, reward) triplets and the per-attempt trajectory that carries them."""

from __future__ import annotations

import time
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.types.core import RolloutMode


class Triplet(BaseModel):
    """Upstream's triplet shape: ``prompt={'token_ids': [...]}``, ``response={'token_ids': [...]}``.

    agl-stream adds ``response['logprobs']`` (behaviour-policy logprobs, for importance sampling)
    and ``policy_version`` (which weights produced the response, for the staleness bound).
    """

    model_config = ConfigDict(extra="ignore")
    prompt: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any] = Field(default_factory=dict)
    reward: Optional[float] = None
    policy_version: Optional[int] = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def prompt_token_ids(self) -> list[int]:
        return list(self.prompt.get("token_ids") or [])

    @property
    def response_token_ids(self) -> list[int]:
        return list(self.response.get("token_ids") or [])

    @property
    def response_logprobs(self) -> Optional[list[float]]:
        lp = self.response.get("logprobs")
        return list(lp) if lp is not None else None


#: Whether a trajectory is its rollout's training signal, as decided by the rollout state machine:
#: ``final`` - its attempt ended the rollout (the only one that may be trained);
#: ``superseded`` - the rollout moved on to a later attempt (kept for analysis, never trained);
#: ``undecided`` - the state machine never named an outcome (a rollout it does not track); never trained.
TrajectoryDecision = Literal["final", "superseded", "undecided"]


class Trajectory(BaseModel):
    """One finished attempt adapted into triplets: the value of an ``agl.triplets`` record."""

    model_config = ConfigDict(extra="ignore")
    rollout_id: str
    attempt_id: str
    attempt_sequence_id: int = 1
    group_id: Optional[str] = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    status: str = "succeeded"
    final_reward: Optional[float] = None
    triplets: list[Triplet] = Field(default_factory=list)
    adapter: str = ""
    span_count: int = 0
    finished_at: Optional[float] = None
    created_at: float = Field(default_factory=time.time)
    metadata: dict[str, Any] = Field(default_factory=dict)
    decision: TrajectoryDecision = Field(default="final", description="see TrajectoryDecision")
    rollout_status: Optional[str] = Field(default=None, description="the rollout's status the decision was made on")

    @property
    def trainable(self) -> bool:
        """The one trajectory of a rollout a learner may train on: the attempt that ended it, succeeded."""
        return self.decision == "final" and self.status == "succeeded" and self.rollout_status in (None, "succeeded")

    @property
    def policy_version(self) -> Optional[int]:
        """The oldest policy version among the triplets (the conservative one for staleness)."""
        versions = [t.policy_version for t in self.triplets if t.policy_version is not None]
        return min(versions) if versions else None
