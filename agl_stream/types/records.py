"""Values of the topic records that have no upstream counterpart: lifecycle events, snapshots, dead letters."""

from __future__ import annotations

import time
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.types.core import Attempt, AttemptStatus, Rollout, RolloutMode

AttemptEventKind = Literal["started", "heartbeat", "finished"]


class AttemptEvent(BaseModel):
    """An attempt's lifecycle as reported by the runner executing it (topic ``agl.attempts``)."""

    model_config = ConfigDict(extra="ignore")
    kind: AttemptEventKind
    rollout_id: str
    attempt_id: str
    attempt_sequence_id: int = Field(default=1, ge=1)
    worker_id: Optional[str] = None
    timestamp: float = Field(default_factory=time.time)
    status: Optional[AttemptStatus] = Field(default=None, description="set on 'finished': succeeded or failed")
    error: Optional[str] = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    span_count: Optional[int] = Field(
        default=None, description="on 'finished': spans the runner produced for this attempt, so consumers know when all arrived"
    )
    stats: dict[str, Any] = Field(default_factory=dict, description="system snapshot on heartbeats")
    metadata: dict[str, Any] = Field(default_factory=dict)


class RolloutSnapshot(BaseModel):
    """The state machine's view of one rollout (topic ``agl.rollouts``, compacted by rollout id)."""

    model_config = ConfigDict(extra="ignore")
    rollout: Rollout
    attempt: Optional[Attempt] = None
    attempts: int = 0
    updated_at: float = Field(default_factory=time.time)


class RolloutControl(BaseModel):
    """A request to change a rollout from outside its runner (today: cancellation)."""

    model_config = ConfigDict(extra="ignore")
    action: Literal["cancel"] = "cancel"
    rollout_id: str
    reason: Optional[str] = None
    timestamp: float = Field(default_factory=time.time)


class DeadLetter(BaseModel):
    """A record that could not be processed, kept with the reason and its original bytes."""

    model_config = ConfigDict(extra="ignore", ser_json_bytes="base64", val_json_bytes="base64")
    source_topic: str
    partition: Optional[int] = None
    offset: Optional[int] = None
    key: Optional[bytes] = None
    payload: bytes = b""
    reason: str
    error_type: str = "RecordError"
    processor: str = ""
    received_at: float = Field(default_factory=time.time)
