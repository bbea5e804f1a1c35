"""The data model (pydantic v2). Names and fields follow upstream ``agentlightning.types``."""

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr

from agl_stream.types.core import (
    ATTEMPT_STATUSES,
    ROLLOUT_STATUSES,
    TERMINAL_ATTEMPT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    TaskInput,
    Worker,
    WorkerStatus,
)
from agl_stream.types.datasets import DatasetLine, DatasetSplit
from agl_stream.types.metrics import TrainingRun, TrainingStep
from agl_stream.types.records import AttemptEvent, AttemptEventKind, DeadLetter, RolloutControl, RolloutSnapshot
from agl_stream.types.resources import LLM, NamedResources, PromptTemplate, ProxyLLM, Resource, ResourcesUpdate
from agl_stream.types.spans import Event, Link, OtelResource, Span, SpanContext, SpanCoreFields, TraceStatus
from agl_stream.types.triplets import Trajectory, TrajectoryDecision, Triplet
from agl_stream.types.upstream import (
    Attributes,
    AttributeValue,
    Dataset,
    ParallelWorkerBase,
    RolloutRawResult,
    SpanAttributeNames,
    SpanLike,
    SpanNames,
    SpanRecordingContext,
    StatusCode,
    TraceState,
)
from agl_stream.types.resources import ResourceUnion

__all__ = [
    "DatasetLine",
    "DatasetSplit",
    "AttributeValue",
    "Attributes",
    "Dataset",
    "ParallelWorkerBase",
    "ResourceUnion",
    "RolloutRawResult",
    "SpanAttributeNames",
    "SpanLike",
    "SpanNames",
    "SpanRecordingContext",
    "StatusCode",
    "TraceState",
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
    "EnqueueRolloutRequest",
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
    "TrainingRun",
    "TrainingStep",
    "Trajectory",
    "TrajectoryDecision",
    "Triplet",
    "Worker",
    "WorkerStatus",
]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
