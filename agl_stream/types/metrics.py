"""Learner metrics as topic records: one :class:`TrainingStep` per optimizer step (topic ``agl.training_steps``),
and one :class:`TrainingRun` per run, at its start and its end (topic ``agl.training_runs``).

The learner publishes them; the ClickHouse sinks write the ``training_steps`` table and
``Trainer.fit``'s progress display reads them live. Keyed by ``run_id``, so one run's steps stay in
order on one partition.
"""

from __future__ import annotations

import time
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class TrainingStep(BaseModel):
    model_config = ConfigDict(extra="ignore")
    run_id: str
    step: int = Field(ge=0)
    policy_version: int = Field(ge=0, description="weights after this step (policy versions count learner steps)")
    timestamp: float = Field(default_factory=time.time, description="when the step finished (epoch seconds)")
    total_steps: Optional[int] = Field(default=None, ge=1, description="the run's step budget, when it has one")
    loss: float = 0.0
    policy_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    reward_mean: float = 0.0
    reward_std: float = 0.0
    advantage_mean: float = 0.0
    advantage_std: float = 0.0
    grad_norm: float = 0.0
    tokens_per_second: float = 0.0
    staleness_mean: float = 0.0
    publish_seconds: float = 0.0
    num_triplets: int = Field(default=0, ge=0)
    num_sequences: int = Field(default=0, ge=0)
    learning_rate: float = 0.0
    staleness_histogram: dict[int, int] = Field(default_factory=dict, description="policy versions behind -> rows")
    extra: dict[str, float] = Field(default_factory=dict)


TrainingRunStatus = Literal["running", "finished", "failed"]


class TrainingRun(BaseModel):
    """One learner run as a whole (topic ``agl.training_runs``, compacted by ``run_id``): published when it starts
    and when it ends. The end record says how many steps it trained of how many asked and, when fewer, why
    (``shortfall``): a run of 0 steps that ended without error must not read as a run that learned."""

    model_config = ConfigDict(extra="ignore")
    run_id: str = Field(min_length=1)
    status: TrainingRunStatus
    started_at: float
    updated_at: float = Field(default_factory=time.time, description="when this record was written (newest wins)")
    ended_at: Optional[float] = None
    steps: int = Field(default=0, ge=0, description="learner steps trained in this run")
    asked_steps: Optional[int] = Field(default=None, ge=1, description="the step budget, when it has one")
    policy_version: int = Field(default=0, ge=0)
    stop_reason: Optional[str] = None
    shortfall: Optional[str] = Field(default=None, description="why it trained fewer steps than asked, if it did")
    error: Optional[str] = None
    algorithm: str = ""
    aggregation: str = Field(default="", description="transition or trajectory (the learner's row making)")
    trained_groups: int = Field(default=0, ge=0)
    equal_reward_groups: int = Field(default=0, ge=0, description="groups whose rewards were all equal (no advantage)")
    dropped_groups: int = Field(default=0, ge=0)
    left_out_groups: int = Field(default=0, ge=0)
    failed_rollouts: int = Field(default=0, ge=0)
