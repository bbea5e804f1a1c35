"""Learner metrics as a topic record: one :class:`TrainingStep` per optimizer step (topic ``agl.training_steps``).

The learner publishes them; the ClickHouse sinks write the ``training_steps`` table and
``Trainer.fit``'s progress display reads them live. Keyed by ``run_id``, so one run's steps stay in
order on one partition.
"""

from __future__ import annotations

import time
from typing import Optional

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
