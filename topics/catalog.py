"""The topic catalog: one declaration per topic of the design.

Rollout-keyed topics share one partition count (``AGL_PARTITIONS``) so that every record of a
rollout lands on the same partition number everywhere; the stream processors rely on that
co-partitioning. Compacted topics keep the latest value per key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pydantic import BaseModel

from agl_stream.config import Settings
from agl_stream.types import (
    AttemptedRollout,
    AttemptEvent,
    DatasetLine,
    DeadLetter,
    ResourcesUpdate,
    RolloutSnapshot,
    Span,
    TrainingRun,
    TrainingStep,
    Trajectory,
    Worker,
)

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    short_name: str
    key: str
    value_model: type[BaseModel]
    cleanup_policy: str  # "delete" or "compact"
    retention_ms: Optional[int]  # None: broker default; -1: forever
    description: str
    co_partitioned: bool = True  # uses the shared rollout partition count
    fixed_partitions: Optional[int] = None
    extra_config: dict[str, str] = field(default_factory=dict)

    def name(self, settings: Settings) -> str:
        return settings.topic(self.short_name)

    def partitions(self, settings: Settings) -> int:
        return settings.partitions if self.co_partitioned else (self.fixed_partitions or 1)

    def config(self, settings: Optional[Settings] = None) -> dict[str, str]:
        """The topic's configuration; with ``settings.topic_profile == "local"``, the local run's (see LOCAL_PROFILE)."""
        cfg = {"cleanup.policy": self.cleanup_policy, **self.extra_config}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        if settings is not None and settings.topic_profile == "local":
            cfg.update(LOCAL_PROFILE[self.cleanup_policy])
            if self.cleanup_policy == "delete" and self.retention_ms is not None:
                cfg["retention.ms"] = str(min(self.retention_ms, LOCAL_RETENTION_MS))
        return cfg


#: A run on one machine (the local stack's own Apache Kafka) must stay within a small disk whatever its
#: length. Segments roll at 16 MiB or 10 minutes, so whole segments can go: a delete topic's records go once
#: every consumer group has committed past them (``agl-stream topics trim``, which the local stack runs,
#: after 5 minutes at least), and after a day in any case; ClickHouse keeps the history. A compacted topic's
#: segments roll every 5 minutes and are cleaned once 10% of the log is superseded, so it holds about
#: one record per key; tombstones stay an hour.
LOCAL_RETENTION_MS = DAY_MS
LOCAL_PROFILE: dict[str, dict[str, str]] = {
    "delete": {"segment.bytes": str(16 * 1024 * 1024), "segment.ms": str(10 * 60 * 1000)},
    "compact": {
        "segment.bytes": str(16 * 1024 * 1024),
        "segment.ms": str(5 * 60 * 1000),
        "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": str(3600 * 1000),
    },
}


CATALOG: tuple[TopicSpec, ...] = (
    TopicSpec("tasks", "rollout_id", AttemptedRollout, "delete", 7 * DAY_MS,
              "rollouts to run, with the attempt to run them as; runners consume in group agl-runners"),
    TopicSpec("attempts", "rollout_id", AttemptEvent, "delete", 7 * DAY_MS,
              "attempt lifecycle from runners: started, heartbeat, finished"),
    TopicSpec("rollouts", "rollout_id", RolloutSnapshot, "compact", None,
              "rollout status snapshots from the state machine; source of truth for wait_for_rollouts"),
    TopicSpec("spans", "rollout_id", Span, "delete", 7 * DAY_MS,
              "spans from the SDK exporter, the OTLP receiver and the LLM proxy"),
    TopicSpec("triplets", "rollout_id", Trajectory, "delete", 7 * DAY_MS,
              "one trajectory of triplets per finished attempt; the learner consumes in group agl-learner"),
    TopicSpec("resources", "resources_id (plus 'latest')", ResourcesUpdate, "compact", None,
              "versioned resources; weights travel by reference", co_partitioned=False, fixed_partitions=1),
    TopicSpec("workers", "worker_id", Worker, "compact", None,
              "runner heartbeats", co_partitioned=False, fixed_partitions=1),
    TopicSpec("dlq", "source key", DeadLetter, "delete", 30 * DAY_MS,
              "rejected records with the reason and the original bytes", co_partitioned=False, fixed_partitions=1),
    TopicSpec("training_steps", "run_id", TrainingStep, "delete", 30 * DAY_MS,
              "learner metrics, one record per optimizer step; the sinks write the training_steps table",
              co_partitioned=False, fixed_partitions=1),
    TopicSpec("training_runs", "run_id", TrainingRun, "compact", None,
              "one record per learner run, at its start and its end (steps, why fewer than asked); the training_runs table",
              co_partitioned=False, fixed_partitions=1),
    TopicSpec("datasets", "data_id", DatasetLine, "delete", 30 * DAY_MS,
              "datasets uploaded to the training server, one record per line; the sinks keep the datasets table",
              co_partitioned=False, fixed_partitions=1),
)  # fmt: skip

BY_SHORT_NAME: dict[str, TopicSpec] = {spec.short_name: spec for spec in CATALOG}


def spec(short_name: str) -> TopicSpec:
    try:
        return BY_SHORT_NAME[short_name]
    except KeyError:
        raise KeyError(f"unknown topic {short_name!r}; the catalog has {sorted(BY_SHORT_NAME)}") from None
