"""The data model (pydantic v2). Names and fields follow upstream ``agentlightning.types``."""

from agl_stream.types.core import (
    ATTEMPT_STATUSES,
    ROLLOUT_STATUSES,
    TERMINAL_ATTEMPT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    TaskInput,
    Worker,
    WorkerStatus,
)
from agl_stream.types.metrics import TrainingStep
from agl_stream.types.records import AttemptEvent, AttemptEventKind, DeadLetter, RolloutControl, RolloutSnapshot
from agl_stream.types.resources import LLM, NamedResources, PromptTemplate, ProxyLLM, Resource, ResourcesUpdate
from agl_stream.types.spans import Event, Link, OtelResource, Span, SpanContext, SpanCoreFields, TraceStatus
from agl_stream.types.triplets import Trajectory, Triplet

__all__ = [
    "ATTEMPT_STATUSES",
    "ROLLOUT_STATUSES",
    "TERMINAL_ATTEMPT_STATUSES",
    "TERMINAL_ROLLOUT_STATUSES",
    "Attempt",
    "AttemptEvent",
    "AttemptEventKind",
    "AttemptStatus",
    "AttemptedRollout",
    "DeadLetter",
    "Event",
    "LLM",
    "Link",
    "NamedResources",
    "OtelResource",
    "PromptTemplate",
    "ProxyLLM",
    "Resource",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutControl",
    "RolloutMode",
    "RolloutSnapshot",
    "RolloutStatus",
    "Span",
    "SpanContext",
    "SpanCoreFields",
    "TaskInput",
    "TraceStatus",
    "TrainingStep",
    "Trajectory",
    "Triplet",
    "Worker",
    "WorkerStatus",
]
