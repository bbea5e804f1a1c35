"""Learner metrics: one :class:`StepMetrics` per step, fanned out to sinks (logs, the ``agl.training_steps``
topic, a JSONL file, TensorBoard, wandb).

A sink is anything with ``write(metrics)`` and ``close()`` (:class:`MetricsSink`). Sinks must not
stop training: a failing sink is logged and skipped for that step.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

from agl_stream.config import Settings
from agl_stream.types import TrainingRun, TrainingStep

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


class TopicSink:
    """Publishes every step to ``agl.training_steps`` as a :class:`~agl_stream.types.TrainingStep` record.

    The ClickHouse sinks write them to the ``training_steps`` table the dashboards read, and
    ``Trainer.fit``'s progress display follows the topic: the learner never touches ClickHouse.
    ``write`` is called on the learner's event loop and only schedules the send (training never
    waits for the broker); :meth:`drain` waits for what was scheduled. A step the producer cannot
    deliver is logged with its step number and counted in ``failed``.
    """

    def __init__(self, producer: Any, settings: Settings, run_id: str, *, total_steps: Optional[int] = None) -> None:
        self.producer = producer
        self.topic = settings.topic("training_steps")
        self.run_id = run_id
        self.total_steps = total_steps
        self.failed = 0
        self._pending: set[asyncio.Task[None]] = set()

    def write(self, m: StepMetrics) -> None:
        task = asyncio.get_running_loop().create_task(self._send(training_step(m, self.run_id, self.total_steps)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, record: TrainingStep) -> None:
        try:
            await self.producer.send_and_wait(self.topic, record, key=self.run_id)
        except Exception as exc:  # metrics must not stop training, but a lost step is reported
            self.failed += 1
            logger.error("training step %d of run %s was not published to %s: %r", record.step, self.run_id, self.topic, exc)

    async def drain(self) -> None:
        """Wait until every scheduled step is acknowledged (or reported as failed)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def close(self) -> None:
        if self._pending:
            logger.warning("%d training step record(s) still in flight at close", len(self._pending))


def training_step(m: StepMetrics, run_id: str, total_steps: Optional[int] = None) -> TrainingStep:
    """The topic record of one step (everything but the rollout ids, which stay in the learner's files)."""
    return TrainingStep(
        run_id=run_id, step=m.step, policy_version=m.policy_version, timestamp=m.timestamp, total_steps=total_steps,
        loss=m.loss, policy_loss=m.policy_loss, kl=m.kl, entropy=m.entropy, reward_mean=m.reward_mean,
        reward_std=m.reward_std, advantage_mean=m.advantage_mean, advantage_std=m.advantage_std,
        grad_norm=m.grad_norm, tokens_per_second=m.tokens_per_second, staleness_mean=m.staleness_mean,
        publish_seconds=m.publish_seconds, num_triplets=m.num_triplets, num_sequences=m.num_sequences,
        learning_rate=m.learning_rate, staleness_histogram=dict(m.staleness_histogram), extra=dict(m.extra),
    )  # fmt: skip


async def publish_run(producer: Any, settings: Settings, run: TrainingRun) -> bool:
    """Send one :class:`TrainingRun` record to ``agl.training_runs``; a failure is logged, never raised (the
    run's own outcome must not depend on it). True when the broker acknowledged it."""
    topic = settings.topic("training_runs")
    try:
        await producer.send_and_wait(topic, run, key=run.run_id)
        return True
    except Exception as exc:
        logger.error("the %s record of run %s was not published to %s: %r", run.status, run.run_id, topic, exc)
        return False


class JsonlSink:
    """One JSON line per step, with the rollout ids each step trained on (audits read it across restarts)."""

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

    async def drain(self) -> None:
        """Wait for sinks that send in the background (``drain()``, e.g. :class:`TopicSink`)."""
        for sink in self.sinks:
            drain = getattr(sink, "drain", None)
            if drain is not None:
                try:
                    await drain()
                except Exception:
                    logger.exception("draining metrics sink %s failed", type(sink).__name__)

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
