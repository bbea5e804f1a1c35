"""``trainer.yaml``: everything ``agl-stream trainer`` needs, validated (unknown keys are errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from agl_stream_trainer.algorithms.grpo import GRPOConfig
from agl_stream_trainer.backends.hf import BackendConfig, OptimConfig
from agl_stream_trainer.batching import BatcherConfig
from agl_stream_trainer.proxy_pause import ProxyPauseConfig
from agl_stream_trainer.scheduler import SchedulerConfig


#: Estimators whose advantage is a reward minus its group's mean: an all-equal group gives zero for everyone.
GROUP_NORMALIZED_ESTIMATORS = ("grpo", "drgrpo", "rloo")


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["embedded", "vllm", "none"] = "embedded"
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    attach_url: Optional[str] = Field(default=None, description="use a running server instead of starting one")
    model_name: Optional[str] = None
    max_batch_rows: int = Field(default=16, ge=1)
    vllm_args: list[str] = Field(default_factory=list)


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: bool = Field(
        default=True,
        validation_alias=AliasChoices("topic", "clickhouse"),  # ``clickhouse:`` is what older configs say
        description="publish every step to agl.training_steps (the sinks write the training_steps table)",
    )
    jsonl: Optional[Path] = Field(default=None, description="also append one JSON line per step to this file")
    tensorboard_dir: Optional[str] = None
    wandb_project: Optional[str] = None
    progress: Optional[bool] = None


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str = "run"
    model: str = Field(default="smollm2", description="smollm2, tiny, or a save_pretrained folder")
    resources_id: str = "policy"
    sampling_parameters: dict[str, float] = Field(default_factory=lambda: {"temperature": 1.0})
    algorithm: GRPOConfig = Field(default_factory=GRPOConfig)
    batcher: BatcherConfig = Field(default_factory=BatcherConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    backend: BackendConfig = Field(default_factory=BackendConfig)
    scheduler: Optional[SchedulerConfig] = Field(default=None, description="None: only learn (tasks come from elsewhere)")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    publish_every: int = Field(default=1, ge=1)
    proxy_pause: ProxyPauseConfig = Field(default_factory=ProxyPauseConfig,
                                          description="LLM proxy replicas paused around each weight update")
    checkpoint_every: int = Field(default=10, ge=0)
    checkpoint_dir: Optional[Path] = Field(default=None, description="default: <AGL_DATA_DIR>/checkpoints/<run_id>")
    keep_checkpoints: int = Field(default=2, ge=1)
    max_steps: Optional[int] = Field(default=None, ge=1)
    max_train_seconds: Optional[float] = Field(
        default=None, gt=0, description="stop training (no new step starts) once the training loop has run this long"
    )
    idle_timeout_s: float = Field(default=60.0, gt=0, description="stop after the dataset is done and nothing arrived this long")

    @model_validator(mode="after")
    def _resolve_dynamic_sampling(self) -> "TrainerConfig":
        """Zero-variance groups carry no signal for group-normalized estimators: leave them out by default."""
        if self.batcher.drop_zero_variance is None:
            grouped = self.algorithm.estimator in GROUP_NORMALIZED_ESTIMATORS
            self.batcher = self.batcher.model_copy(update={"drop_zero_variance": grouped})
        return self

    @classmethod
    def from_yaml(cls, path: Path) -> "TrainerConfig":
        import yaml

        data = yaml.safe_load(Path(path).read_text()) or {}
        return cls.model_validate(data)
