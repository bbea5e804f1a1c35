"""Learner metrics: one :class:`StepMetrics` per step, fanned out to sinks (logs, ClickHouse, TensorBoard, wandb).

A sink is anything with ``write(metrics)`` and ``close()`` (:class:`MetricsSink`). Sinks must not
stop training: a failing sink is logged and skipped for that step.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

logger = logging.getLogger(__name__)


@dataclass
class StepMetrics:
    step: int
    policy_version: int
    loss: float
    policy_loss: float
    kl: float
    entropy: float
    reward_mean: float
    reward_std: float
    advantage_mean: float
    advantage_std: float
    grad_norm: float
    tokens_per_second: float
    staleness_mean: float
    publish_seconds: float
    num_triplets: int
    num_sequences: int
    learning_rate: float
    timestamp: float = field(default_factory=time.time)
    staleness_histogram: dict[int, int] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    # what the step trained on, in batch order: audits check that across crashes and resumes every
    # rollout trains exactly once
    rollout_ids: list[str] = field(default_factory=list)

    def flat(self) -> dict[str, float]:
        """Every number as one flat dict (for TensorBoard / wandb)."""
        out = {k: float(v) for k, v in asdict(self).items() if isinstance(v, (int, float)) and k not in ("step", "timestamp")}
        out.update({f"staleness/{k}": float(v) for k, v in self.staleness_histogram.items()})
        out.update({f"extra/{k}": float(v) for k, v in self.extra.items()})
        return out


class MetricsSink(Protocol):
    def write(self, metrics: StepMetrics) -> None: ...

    def close(self) -> None: ...


class LogSink:
    """One log line per step, plus a rich progress bar when the output is a terminal (or ``progress=True``)."""

    def __init__(self, total_steps: Optional[int] = None, progress: Optional[bool] = None) -> None:
        import sys

        self._progress = None
        self._task = None
        if progress if progress is not None else sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]learner"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
            )
            self._progress.start()
            self._task = self._progress.add_task("steps", total=total_steps, info="")

    def write(self, m: StepMetrics) -> None:
        info = (f"v{m.policy_version} loss={m.loss:.4f} kl={m.kl:.4f} H={m.entropy:.3f} "
                f"R={m.reward_mean:.3f}±{m.reward_std:.3f} |g|={m.grad_norm:.3f} {m.tokens_per_second:.0f} tok/s "
                f"stale={m.staleness_mean:.2f} pub={m.publish_seconds:.2f}s")
        logger.info("step %d %s", m.step, info)
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=m.step, info=info)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


class ClickHouseSink:
    """Rows of the ``training_steps`` table (deploy/clickhouse migrations), one per step, keyed by RunId."""

    TABLE = "training_steps"

    def __init__(self, dsn: str, run_id: str, *, database: Optional[str] = None, migrate: bool = True) -> None:
        from agl_stream_processors.clickhouse.client import connect

        self.run_id = run_id
        self.ch = connect(dsn, database)
        if migrate:  # idempotent: creates the database and applies pending migrations (training_steps among them)
            from agl_stream_processors.clickhouse.migrations import migrate as run_migrations

            run_migrations(self.ch)

    def write(self, m: StepMetrics) -> None:
        import pyarrow as pa

        row = {
            "RunId": [self.run_id],
            "Step": pa.array([m.step], pa.uint64()),
            "PolicyVersion": pa.array([m.policy_version], pa.uint64()),
            "Timestamp": pa.array([datetime.fromtimestamp(m.timestamp, tz=timezone.utc)], pa.timestamp("ms", tz="UTC")),
            "Loss": [m.loss], "PolicyLoss": [m.policy_loss], "KL": [m.kl], "Entropy": [m.entropy],
            "RewardMean": [m.reward_mean], "RewardStd": [m.reward_std],
            "AdvantageMean": [m.advantage_mean], "AdvantageStd": [m.advantage_std],
            "GradNorm": [m.grad_norm], "TokensPerSecond": [m.tokens_per_second],
            "StalenessMean": [m.staleness_mean], "PublishSeconds": [m.publish_seconds],
            "NumTriplets": pa.array([m.num_triplets], pa.uint64()),
            "NumSequences": pa.array([m.num_sequences], pa.uint64()),
            "LearningRate": [m.learning_rate],
            "Extra": pa.array(
                [list({**m.extra, **{f"staleness_{k}": float(v) for k, v in m.staleness_histogram.items()}}.items())],
                pa.map_(pa.string(), pa.float64()),
            ),
        }
        self.ch.insert_arrow(self.TABLE, pa.table(row))

    def close(self) -> None:
        self.ch.close()


class JsonlSink:
    """One JSON line per step: a file the demo plots, and that can be loaded into ``training_steps``
    later when the embedded ClickHouse is owned by another process (the sinks) during the run."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, m: StepMetrics) -> None:
        self._fh.write(json.dumps(asdict(m), default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def read_jsonl_metrics(path: Path) -> list[StepMetrics]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        doc["staleness_histogram"] = {int(k): v for k, v in doc.get("staleness_histogram", {}).items()}
        rows.append(StepMetrics(**doc))
    return rows


class TensorBoardSink:
    def __init__(self, log_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(log_dir)

    def write(self, m: StepMetrics) -> None:
        for key, value in m.flat().items():
            self.writer.add_scalar(key, value, m.step)

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, project: str, run_name: Optional[str] = None, config: Optional[dict[str, Any]] = None) -> None:
        import wandb

        self.run = wandb.init(project=project, name=run_name, config=config or {})

    def write(self, m: StepMetrics) -> None:
        self.run.log(m.flat(), step=m.step)

    def close(self) -> None:
        self.run.finish()


class MetricsHub:
    """Fans each step out to every sink; a sink that raises is logged, never fatal."""

    def __init__(self, sinks: Sequence[MetricsSink] = ()) -> None:
        self.sinks = list(sinks)
        self.history: list[StepMetrics] = []
        self.max_history = 1000

    def write(self, metrics: StepMetrics) -> None:
        self.history.append(metrics)
        del self.history[: -self.max_history]
        for sink in self.sinks:
            try:
                sink.write(metrics)
            except Exception:
                logger.exception("metrics sink %s failed", type(sink).__name__)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("closing metrics sink %s failed", type(sink).__name__)


def optional_sinks(tensorboard_dir: Optional[str] = None, wandb_project: Optional[str] = None) -> list[MetricsSink]:
    """TensorBoard / wandb sinks when asked for and installed (a missing package is logged, not fatal)."""
    sinks: list[MetricsSink] = []
    if tensorboard_dir:
        try:
            sinks.append(TensorBoardSink(tensorboard_dir))
        except ImportError as exc:
            logger.warning("tensorboard metrics disabled: %s", exc)
    if wandb_project:
        try:
            sinks.append(WandbSink(wandb_project))
        except ImportError as exc:
            logger.warning("wandb metrics disabled: %s", exc)
    return sinks
