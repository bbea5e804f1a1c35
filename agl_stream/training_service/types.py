"""The training service's data: what the server answers and what ``agent_func`` receives.

The server's JSON bodies are these pydantic models (it imports them), so client and server cannot
drift apart. ``Resource`` and ``Task`` are what an ``agent_func(resource, task) -> float`` gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

JobKind = Literal["train", "evaluate"]
JobState = Literal["queued", "running", "succeeded", "failed", "stopped"]
TERMINAL_JOB_STATES: tuple[str, ...] = ("succeeded", "failed", "stopped")


class TrainingServiceError(RuntimeError):
    """One clear error from the server (or from reaching it): HTTP status, machine-readable code, message."""

    def __init__(self, message: str, *, status: Optional[int] = None, code: str = "error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ClusterInfo(_Model):
    """Where the client's runner processes reach the server's pipeline."""

    kafka_bootstrap: str
    topic_prefix: str
    partitions: int


class DatasetInfo(_Model):
    data_id: str
    train_lines: int
    test_lines: int = 0
    train_file: str = ""
    test_file: str = ""
    uploaded_at: float = 0.0


class CheckpointInfo(_Model):
    name: str = Field(description="'<job_id>/step-NNNNNNNN': what evaluate(checkpoint=) and download_model take")
    job_id: str
    step: int
    policy_version: int
    created_at: float


class StepPoint(_Model):
    """One learner step as the ``training_steps`` table holds it."""

    step: int
    policy_version: int
    reward_mean: float
    reward_std: float
    loss: float
    timestamp: float


class EvalResult(_Model):
    eval_id: str
    checkpoint: Optional[str] = Field(description="the checkpoint whose weights answered (None: the base model)")
    policy_version: int
    n: int = Field(description="tasks evaluated")
    mean_reward: float = Field(description="mean of agent_func's rewards; a failed or missing rollout counts 0")
    accuracy: Optional[float] = Field(
        default=None, description="over tasks with a ground_truth: the fraction whose reward reached success_threshold"
    )
    n_with_ground_truth: int = 0
    success_threshold: float = 1.0
    failed: int = 0
    missing: int = 0
    rewards: list[float] = Field(default_factory=list)
    step: Optional[int] = Field(default=None, description="the learner step it ran after (eval_interval), if any")
    duration_s: float = 0.0


class JobStatus(_Model):
    job_id: str
    kind: JobKind
    state: JobState
    data_id: Optional[str] = None
    step: int = 0
    max_steps: Optional[int] = None
    policy_version: int = 0
    reward_mean: Optional[float] = None
    rollouts_expected: Optional[int] = None
    error: Optional[str] = None
    stop_reason: Optional[str] = None
    shortfall: Optional[str] = Field(None, description="why the job trained fewer learner steps than asked, if it did")
    created_at: float = 0.0
    finished_at: Optional[float] = None
    cluster: Optional[ClusterInfo] = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


class TrainingResult(_Model):
    job_id: str
    state: JobState
    stop_reason: Optional[str] = None
    shortfall: Optional[str] = Field(None, description="why the job trained fewer learner steps than asked, if it did")
    steps: int = 0
    policy_version: int = 0
    reward_curve: list[float] = Field(default_factory=list, description="mean batch reward per learner step")
    loss_curve: list[float] = Field(default_factory=list)
    history: list[StepPoint] = Field(default_factory=list, description="the run's rows of the training_steps table")
    checkpoints: list[CheckpointInfo] = Field(default_factory=list)
    final_checkpoint: Optional[str] = None
    training_time_s: float = 0.0
    evaluations: list[EvalResult] = Field(default_factory=list, description="every eval_interval steps, on the test split")
    validation: dict[str, Any] = Field(default_factory=dict, description="held-out accuracy before/after (the test split)")
    error: Optional[str] = None


@dataclass(frozen=True)
class Resource:
    """What ``agent_func`` calls: an OpenAI-compatible ``model_api`` (base URL) serving ``model_name``."""

    model_api: str
    model_name: str
    task_id: str
    worker_id: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


class Task(Mapping[str, Any]):
    """One JSONL item: ``task.question`` and ``task["question"]`` both work, for every field."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            if name == "ground_truth":
                return None  # optional in the format: absent reads as None
            raise AttributeError(f"this task has no field {name!r} (fields: {sorted(self._data)})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Task is read-only")

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Task({self._data!r})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)
