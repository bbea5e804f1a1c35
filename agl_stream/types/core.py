"""Rollouts, attempts and workers: names, fields and statuses exactly as upstream Agent Lightning."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agl_stream._porting import module_getattr

RolloutStatus = Literal["queuing", "preparing", "running", "requeuing", "succeeded", "failed", "cancelled"]
RolloutMode = Literal["train", "val", "test"]
AttemptStatus = Literal["preparing", "running", "succeeded", "failed", "unresponsive", "timeout"]
WorkerStatus = Literal["idle", "busy", "offline"]

TERMINAL_ROLLOUT_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
TERMINAL_ATTEMPT_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "timeout"})
ROLLOUT_STATUSES: tuple[str, ...] = get_args(RolloutStatus)
ATTEMPT_STATUSES: tuple[str, ...] = get_args(AttemptStatus)

TaskInput = Any


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=False)


class RolloutConfig(_Model):
    """Retry and watchdog policy of a rollout.

    A failed/timeout/unresponsive attempt is requeued when its status is in ``retry_condition``
    and fewer than ``max_attempts`` attempts were made; otherwise the rollout fails.
    """

    timeout_seconds: Optional[float] = Field(default=None, gt=0)
    unresponsive_seconds: Optional[float] = Field(default=None, gt=0)
    max_attempts: int = Field(default=1, ge=1)
    retry_condition: list[AttemptStatus] = Field(default_factory=list)


class Rollout(_Model):
    rollout_id: str
    input: TaskInput = None
    start_time: float = Field(default_factory=time.time)
    end_time: Optional[float] = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    status: RolloutStatus = "queuing"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Attempt(_Model):
    rollout_id: str
    attempt_id: str
    sequence_id: int = Field(default=1, ge=1, description="attempt number, starting at 1")
    start_time: float = Field(default_factory=time.time)
    end_time: Optional[float] = None
    status: AttemptStatus = "preparing"
    worker_id: Optional[str] = None
    last_heartbeat_time: Optional[float] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class AttemptedRollout(Rollout):
    """A rollout together with the attempt that is (about to be) running it."""

    attempt: Attempt

    @model_validator(mode="after")
    def _attempt_belongs_to_rollout(self) -> "AttemptedRollout":
        if self.attempt.rollout_id != self.rollout_id:
            raise ValueError(
                f"attempt {self.attempt.attempt_id} belongs to rollout {self.attempt.rollout_id}, not {self.rollout_id}"
            )
        return self


class Worker(_Model):
    worker_id: str
    status: WorkerStatus = "idle"
    heartbeat_stats: dict[str, Any] = Field(default_factory=dict)
    last_heartbeat_time: Optional[float] = None
    last_dequeue_time: Optional[float] = None
    last_busy_time: Optional[float] = None
    last_idle_time: Optional[float] = None
    current_rollout_id: Optional[str] = None
    current_attempt_id: Optional[str] = None


class EnqueueRolloutRequest(BaseModel):
    """One rollout to enqueue (upstream's request model; ``StoreClient.enqueue_many_rollouts`` takes a list)."""

    model_config = ConfigDict(extra="forbid")
    input: Any = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


# Upstream's ``agentlightning.types.core`` also holds names agl-stream defines beside what uses them (they
# resolve on first use) and v0.1 and store-query types it refuses with their replacement.
if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
