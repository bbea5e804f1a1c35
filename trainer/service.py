"""``agl-stream trainer``: the scheduler and the learner as one service.

Start-up: load the policy (and resume the latest checkpoint), start the inference engine
(the embedded server in this process, a launched vLLM, or an attached URL), publish the current
weights and announce them on ``agl.resources``, then run two tasks concurrently:

- the scheduler enqueues the dataset's groups into ``agl.tasks`` with bounded rollouts in flight;
- the learner trains on ``agl.triplets`` batches as they complete, publishing every
  ``publish_every`` steps and checkpointing every ``checkpoint_every`` steps.

The service stops at ``max_steps``, after ``max_train_seconds`` of training (a step under way
finishes), or when the scheduler has enqueued everything, no rollout is
in flight, and no batch arrived for ``idle_timeout_s`` (remaining complete groups are trained
first), or when the batcher gives up on a task with no learning signal (:class:`NoLearningSignal`:
too many groups in a row whose rewards were all equal - the policy already solves, or never
solves, what it is given); ``stop_reason`` says which. A final checkpoint is written on the way out,
and the ``after_loop`` evaluation runs in every case.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional, Sequence

from agl_stream.config import Settings
from agl_stream.types import TrainingRun
from agl_stream.types.metrics import TrainingRunStatus

from agl_stream_trainer.backends.hf import HFPolicy
from agl_stream_trainer.batching import NoLearningSignal
from agl_stream_trainer.checkpoint import CheckpointManager
from agl_stream_trainer.config import TrainerConfig
from agl_stream_trainer.learner import Learner
from agl_stream_trainer.metrics import JsonlSink, LogSink, MetricsHub, TopicSink, optional_sinks, publish_run
from agl_stream_trainer.proxy_pause import ProxyPause
from agl_stream_trainer.publisher import WeightPublisher
from agl_stream_trainer.shortfall import explain_shortfall

logger = logging.getLogger(__name__)


async def start_engine(settings: Settings, cfg: Any, model_dir: Path, model_name: str, closers: list[Any]) -> Any:
    """The inference engine ``cfg`` (an ``EngineConfig``) names, serving ``model_dir``; what must be
    closed at the end is appended to ``closers`` (sync or async callables). None for ``kind: none``."""
    if cfg.kind == "embedded":
        from agl_stream_trainer.engines.embedded import EmbeddedEngine, EmbeddedServer
        from agl_stream_trainer.engines.generation import Generator
        from agl_stream_trainer.models import load_model_and_tokenizer

        if cfg.attach_url:
            return EmbeddedEngine(cfg.attach_url, model_name, publish_dir=settings.data_dir / "published")
        served, tokenizer, _ = await asyncio.to_thread(load_model_and_tokenizer, str(model_dir))
        generator = Generator(served, tokenizer, max_batch_rows=cfg.max_batch_rows)
        server = EmbeddedServer(generator, model_name, cfg.host, cfg.port).start()
        closers += [server.stop, generator.close]
        logger.info("embedded inference server at %s/v1", server.base_url)
        return EmbeddedEngine(server.base_url, model_name, generator=generator)
    if cfg.kind == "vllm":
        from agl_stream_trainer.engines.vllm import VLLMEngine

        if cfg.attach_url:
            return VLLMEngine(cfg.attach_url, model_name, model_dir)
        engine = await VLLMEngine.launch(model_dir, model_name, host=cfg.host, port=cfg.port or 8000, extra_args=cfg.vllm_args)
        closers.append(engine.close)
        return engine
    return None


class TrainerService:
    def __init__(
        self,
        settings: Settings,
        config: TrainerConfig,
        *,
        before_loop: Optional[Callable[["TrainerService"], Awaitable[None]]] = None,
        after_loop: Optional[Callable[["TrainerService"], Awaitable[None]]] = None,
        extra_sinks: Sequence[Any] = (),
        extra_resources: Optional[dict[str, Any]] = None,
    ) -> None:
        """``before_loop`` / ``after_loop`` run while the engine serves (e.g. evaluations before and
        after training); ``extra_sinks`` receive every step's metrics too."""
        self.settings = settings
        self.config = config
        self.before_loop = before_loop
        self.after_loop = after_loop
        self.extra_sinks = list(extra_sinks)
        self.extra_resources = dict(extra_resources or {})  # published beside the policy (e.g. a prompt template)
        self.learner: Optional[Learner] = None
        self.scheduler: Any = None
        self.stop_reason: Optional[str] = None  # why training ended: max_steps, dataset done, no learning signal
        self.shortfall: Optional[str] = None  # why it trained fewer steps than asked (explain_shortfall), if it did
        self._closers: list[Any] = []

    async def _engine(self, model_dir: Path, model_name: str) -> Any:
        return await start_engine(self.settings, self.config.engine, model_dir, model_name, self._closers)

    async def run(self) -> None:
        from agl_stream.kafka import RecordProducer

        from agl_stream_trainer.models import load_model_and_tokenizer

        cfg = self.config
        model, tokenizer, model_dir = await asyncio.to_thread(load_model_and_tokenizer, cfg.model)
        model_name = cfg.engine.model_name or (cfg.model if cfg.model in ("smollm2", "tiny") else Path(cfg.model).name)
        policy = HFPolicy(model, cfg.optim, cfg.backend)
        checkpoint_dir = cfg.checkpoint_dir or self.settings.data_dir / "checkpoints" / cfg.run_id
        sinks: list[Any] = [LogSink(cfg.max_steps, cfg.metrics.progress)]
        if cfg.metrics.jsonl is not None:
            sinks.append(JsonlSink(cfg.metrics.jsonl))
        sinks += optional_sinks(cfg.metrics.tensorboard_dir, cfg.metrics.wandb_project)
        sinks += self.extra_sinks

        producer = await RecordProducer(self.settings).start()
        if cfg.metrics.topic:  # the sinks write agl.training_steps to ClickHouse's training_steps table
            sinks.append(TopicSink(producer, self.settings, cfg.run_id, total_steps=cfg.max_steps))
        metrics = MetricsHub(sinks)
        started_at, error = time.time(), None
        if cfg.metrics.topic:
            await publish_run(producer, self.settings, self.run_record("running", started_at))
        try:
            engine = await self._engine(model_dir, model_name)
            publisher = None
            if engine is not None:
                publisher = WeightPublisher(engine, producer, self.settings, resources_id=cfg.resources_id,
                                            sampling_parameters=cfg.sampling_parameters,
                                            extra_resources=self.extra_resources,
                                            proxy_pause=ProxyPause(cfg.proxy_pause, self.settings.ingest_token))  # fmt: skip
            learner = self.learner = Learner(
                self.settings, policy, tokenizer, cfg.algorithm, cfg.batcher,
                publisher=publisher, checkpoints=CheckpointManager(checkpoint_dir, cfg.keep_checkpoints),
                metrics=metrics, publish_every=cfg.publish_every, checkpoint_every=cfg.checkpoint_every,
                dlq_producer=producer,
            )
            await learner.start()
            if publisher is not None:
                if learner.policy_version > 0:
                    await learner.publish()  # the engine loaded the base weights; serve the checkpoint's
                else:
                    await publisher.announce(0)
            if self.before_loop is not None:
                await self.before_loop(self)
            await self._loop(learner, producer)
            self._note_shortfall(learner)
            if self.after_loop is not None:
                await self.after_loop(self)
            if cfg.checkpoint_every:
                await learner.checkpoint()
        except BaseException as exc:  # said in the run's record, then raised as it was
            error = "cancelled" if isinstance(exc, asyncio.CancelledError) else repr(exc)
            raise
        finally:
            if self.learner is not None:
                await self.learner.stop()
            await metrics.drain()
            metrics.close()
            if cfg.metrics.topic:
                end = self.run_record("failed" if error else "finished", started_at, ended_at=time.time(), error=error)
                await publish_run(producer, self.settings, end)
            await producer.stop()
            for close in reversed(self._closers):
                result = close()
                if asyncio.iscoroutine(result):
                    await result

    def run_record(self, status: TrainingRunStatus, started_at: float, *, ended_at: Optional[float] = None,
                   error: Optional[str] = None) -> TrainingRun:  # fmt: skip
        """The run as one ``agl.training_runs`` record: the steps, why fewer than asked, what the batcher saw."""
        learner, cfg = self.learner, self.config
        stats = learner.batcher.stats if learner is not None and learner.batcher is not None else None
        return TrainingRun(
            run_id=cfg.run_id, status=status, started_at=started_at, ended_at=ended_at, error=error,
            steps=learner.step if learner is not None else 0, asked_steps=cfg.max_steps,
            policy_version=learner.policy_version if learner is not None else 0,
            stop_reason=self.stop_reason, shortfall=self.shortfall,
            algorithm=cfg.algorithm.estimator, aggregation=cfg.algorithm.aggregation,
            trained_groups=stats.trained_groups if stats else 0,
            equal_reward_groups=stats.zero_variance_groups if stats else 0,
            dropped_groups=stats.dropped_groups if stats else 0,
            left_out_groups=stats.left_out_groups if stats else 0,
            failed_rollouts=stats.failed_rollouts if stats else 0,
        )  # fmt: skip

    def _note_shortfall(self, learner: Learner) -> None:
        if learner.batcher is None:
            return
        self.shortfall = explain_shortfall(learner.step, self.config.max_steps, self.stop_reason, learner.batcher.stats)
        if self.shortfall is not None:
            logger.warning("training trained less than asked: %s", self.shortfall)

    def _every_trajectory_filed(self, learner: Learner) -> bool:
        """Nothing can still arrive: every enqueued rollout has its trajectory filed and no group waits.

        (The idle timeout covers the rest: trajectories still in transit when the last rollout finished.)"""
        if self.scheduler is None or learner.batcher is None:
            return False
        assembler = learner.batcher.assembler
        return assembler.pending_groups == 0 and assembler.stats.rollouts_filed >= self.scheduler.enqueued

    async def _loop(self, learner: Learner, producer: Any) -> None:
        cfg = self.config
        scheduler_task: Optional[asyncio.Task[None]] = None
        in_flight = None
        if cfg.scheduler is not None:
            from agl_stream_trainer.scheduler import InFlight, TaskScheduler, load_dataset

            if not cfg.scheduler.dataset:
                raise ValueError("scheduler.dataset is required when a scheduler is configured")
            items = load_dataset(cfg.scheduler.dataset)
            in_flight = InFlight(self.settings)
            await in_flight.start()
            self.scheduler = TaskScheduler(self.settings, producer, items, cfg.scheduler, in_flight=in_flight)
            self.scheduler.restore(learner.extra_state.get("scheduler", {}))
            scheduler_task = asyncio.create_task(self.scheduler.run(), name="agl-scheduler")
        idle = 0.0
        started = time.monotonic()
        try:
            while cfg.max_steps is None or learner.step < cfg.max_steps:
                if cfg.max_train_seconds is not None and time.monotonic() - started >= cfg.max_train_seconds:
                    self.stop_reason = f"time budget: {cfg.max_train_seconds:.0f}s of training"
                    logger.info("training stops at step %d: the time budget of %.0fs is spent", learner.step, cfg.max_train_seconds)
                    return
                if scheduler_task is not None and scheduler_task.done() and scheduler_task.exception():
                    raise scheduler_task.exception()  # type: ignore[misc]
                if self.scheduler is not None:
                    learner.extra_state["scheduler"] = self.scheduler.state()
                finished = scheduler_task is None or (scheduler_task.done() and in_flight is not None and in_flight.count == 0)
                try:
                    metrics = await learner.step_once(timeout=5.0, force=finished)
                except NoLearningSignal as exc:
                    self.stop_reason = f"no learning signal: {exc}"
                    logger.warning("stopping training at step %d: %s", learner.step, exc)
                    return
                if metrics is not None:
                    idle = 0.0
                    continue
                idle += 5.0
                if finished and self._every_trajectory_filed(learner):
                    logger.info("dataset done and every rollout's trajectory arrived; no batch is left: stopping")
                    self.stop_reason = "dataset done"
                    return
                if finished and scheduler_task is not None and idle >= cfg.idle_timeout_s:
                    logger.info("dataset done and no batch for %.0fs: stopping", idle)
                    self.stop_reason = "dataset done"
                    return
            self.stop_reason = "max_steps"
        finally:
            if scheduler_task is not None:
                scheduler_task.cancel()
                await asyncio.gather(scheduler_task, return_exceptions=True)
            if in_flight is not None:
                await in_flight.stop()
