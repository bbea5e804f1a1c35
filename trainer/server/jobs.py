"""Jobs: one training run (the ``RL`` algorithm) or one evaluation of a checkpoint at a time.

A job's record (``<root>/jobs/<job_id>/job.json``) is rewritten at every state change, so a
restarted server lists what ran; a job that was running when the server stopped reads as failed
with that reason. Checkpoints live under ``<root>/checkpoints/<job_id>`` (or the job's
``checkpoint_dir``), where the learner writes them; their names are ``<job_id>/step-NNNNNNNN``.
The runners are the client's: a job enqueues tasks and waits for their outcomes, whoever runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional

from agl_stream.algorithm import RolloutResults, run_dataset
from agl_stream.client import StoreClient
from agl_stream.client.clickhouse_reader import ClickHouseReader
from agl_stream.config import Settings
from agl_stream.training_service.types import (
    CheckpointInfo,
    ClusterInfo,
    EvalResult,
    JobStatus,
    StepPoint,
    TrainingResult,
)

from agl_stream_trainer.export import list_checkpoints, resolve_checkpoint
from agl_stream_trainer.server.datasets import DatasetStore
from agl_stream_trainer.server.errors import ServiceError, bad_request, conflict, not_found

logger = logging.getLogger(__name__)

#: the server's trainer settings unless the server's --config or a request says otherwise
DEFAULT_TRAINER_CONFIG: dict[str, Any] = {
    "model": "smollm2",
    "sampling_parameters": {"temperature": 1.0},
    "scheduler": {"mode": "train", "group_size": 4, "epochs": 1, "shuffle": True, "max_in_flight": 32},
    "batcher": {"group_size": 4, "batch_groups": 2, "group_timeout_s": 120, "min_group_size": 2, "max_staleness": 2},
    "algorithm": {"estimator": "grpo", "loss_agg_mode": "token-mean", "kl_coef": 0.0},
    "engine": {"kind": "embedded", "max_batch_rows": 16},
    "publish_every": 1,
    "checkpoint_every": 5,
    "keep_checkpoints": 3,
    "idle_timeout_s": 60,
}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _interrupted(status: JobStatus) -> JobStatus:
    if status.done:
        return status
    return status.model_copy(update={"state": "failed", "error": "the server stopped while the job ran"})


class _StepSink:
    """Live progress for the job's status, and the ``eval_interval`` evaluations, from each learner step."""

    def __init__(self, job: "Job", every: Optional[int], evaluate: Any) -> None:
        self.job = job
        self.every = every
        self.evaluate = evaluate  # coroutine function (step) -> None
        self.loop = asyncio.get_running_loop()
        self.pending: list["asyncio.Future[Any]"] = []

    def write(self, m: Any) -> None:
        self.job.update(step=m.step, policy_version=m.policy_version, reward_mean=m.reward_mean)
        if self.every and m.step % self.every == 0:
            self.loop.call_soon_threadsafe(lambda: self.pending.append(asyncio.ensure_future(self.evaluate(m.step))))

    def close(self) -> None:
        pass


class Job:
    def __init__(self, root: Path, status: JobStatus, spec: dict[str, Any]) -> None:
        self.dir = root / status.job_id
        self.status = status
        self.spec = spec  # the request, resolved: data_id, config, checkpoint...
        self.task: Optional["asyncio.Task[Any]"] = None
        self.result: Optional[dict[str, Any]] = None
        self.last_seen = time.monotonic()  # when its client last asked about it (the runners are the client's)
        self.stopping: Optional[str] = None  # why it is being cancelled

    def update(self, **fields: Any) -> None:
        self.status = self.status.model_copy(update=fields)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        doc = {"status": self.status.model_dump(mode="json"), "spec": self.spec, "result": self.result}
        tmp = self.dir / "job.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        tmp.replace(self.dir / "job.json")

    @classmethod
    def load(cls, root: Path, path: Path) -> "Job":
        doc = json.loads(path.read_text())
        job = cls(root, _interrupted(JobStatus.model_validate(doc["status"])), doc.get("spec") or {})
        job.result = doc.get("result")
        return job


class JobManager:
    def __init__(self, root: Path, settings: Settings, client: StoreClient, datasets: DatasetStore,
                 reader: ClickHouseReader, trainer_config: dict[str, Any], *, eval_timeout: float = 1800.0,
                 client_timeout: float = 300.0) -> None:  # fmt: skip
        self.root = root
        self.settings = settings
        self.client = client
        self.datasets = datasets
        self.reader = reader
        self.trainer_config = trainer_config
        self.eval_timeout = eval_timeout
        #: a running job whose client has not asked about it for this long is stopped: its runners are gone
        #: (the client was killed), so its rollouts would wait forever
        self.client_timeout = client_timeout
        self.jobs: dict[str, Job] = {}
        self._watchdog: Optional["asyncio.Task[None]"] = None
        self.cluster = ClusterInfo(kafka_bootstrap=settings.kafka_bootstrap or "", topic_prefix=settings.topic_prefix,
                                   partitions=settings.partitions)  # fmt: skip
        loaded = [Job.load(root / "jobs", path) for path in (root / "jobs").glob("*/job.json")]
        for job in sorted(loaded, key=lambda j: j.status.created_at):
            job.update(cluster=None)
            self.jobs[job.status.job_id] = job
            job.save()

    # ---------------------------------------------------------------- lookups

    def get(self, job_id: str) -> Job:
        try:
            job = self.jobs[job_id]
        except KeyError:
            raise not_found(f"unknown job {job_id!r}", "unknown_job") from None
        job.last_seen = time.monotonic()
        return job

    def start_watchdog(self, interval: float = 5.0) -> None:
        self._watchdog = asyncio.create_task(self._watch(interval), name="job-watchdog")

    async def _watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            for job in list(self.jobs.values()):
                silent = time.monotonic() - job.last_seen
                if not job.status.done and job.task is not None and silent > self.client_timeout:
                    logger.warning("job %s: no word from its client for %.0fs; stopping it", job.status.job_id, silent)
                    await self.stop(job.status.job_id, reason=f"its client was silent for {silent:.0f}s")

    def _running(self) -> Optional[Job]:
        return next((j for j in self.jobs.values() if not j.status.done), None)

    def _new(self, kind: str, spec: dict[str, Any], **fields: Any) -> Job:
        busy = self._running()
        if busy is not None:
            raise conflict(f"job {busy.status.job_id} ({busy.status.kind}) is running; one job runs at a time", "busy")
        job_id = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        status = JobStatus(job_id=job_id, kind=kind, state="queued", created_at=time.time(), cluster=self.cluster, **fields)  # type: ignore[arg-type]
        job = self.jobs[job_id] = Job(self.root / "jobs", status, spec)
        job.save()
        return job

    def checkpoint_root(self, job: Job) -> Path:
        return Path(job.spec["checkpoint_dir"])

    def checkpoints(self, job_id: Optional[str] = None) -> list[CheckpointInfo]:
        out: list[CheckpointInfo] = []
        for job in self.jobs.values():
            if job.status.kind != "train" or (job_id is not None and job.status.job_id != job_id):
                continue
            for info in list_checkpoints(self.checkpoint_root(job)):
                out.append(CheckpointInfo(name=f"{job.status.job_id}/{info.name}", job_id=job.status.job_id, step=info.step,
                                          policy_version=info.policy_version, created_at=info.created.timestamp()))  # fmt: skip
        if job_id is not None and job_id not in self.jobs:
            raise not_found(f"unknown job {job_id!r}", "unknown_job")
        return sorted(out, key=lambda c: (c.created_at, c.step))

    def resolve(self, name: str) -> tuple[Path, str, CheckpointInfo]:
        """(checkpoint folder, the base model it was trained from, its info) for a name or "latest"."""
        known = self.checkpoints()
        if name == "latest":
            if not known:
                raise not_found("no checkpoint yet: train first", "unknown_checkpoint")
            info = known[-1]
        else:
            info = next((c for c in known if c.name == name), None)  # type: ignore[assignment]
            if info is None:
                shown = [c.name for c in known][-10:]
                raise not_found(f"unknown checkpoint {name!r}; known: {shown or 'none'}", "unknown_checkpoint")
        job = self.jobs[info.job_id]
        path = resolve_checkpoint(self.checkpoint_root(job), info.name.split("/", 1)[1])
        return path, job.spec["config"]["model"], info

    # ---------------------------------------------------------------- training

    async def start_training(self, request: dict[str, Any]) -> JobStatus:
        from agl_stream_trainer.config import TrainerConfig

        info = await self.datasets.get(request.get("data_id"))
        overrides = request.get("config") or {}
        if not isinstance(overrides, dict):
            raise bad_request("config must be an object of trainer settings")
        for key in ("epochs", "batch_size"):
            if not isinstance(request.get(key), int) or request[key] < 1:
                raise bad_request(f"{key} must be a positive integer, got {request.get(key)!r}")
        eval_interval = request.get("eval_interval")
        if eval_interval is not None and (not isinstance(eval_interval, int) or eval_interval < 1):
            raise bad_request(f"eval_interval must be a positive integer or null, got {eval_interval!r}")
        config = deep_merge(self.trainer_config, overrides)
        group_size = request.get("group_size") or config["scheduler"].get("group_size", 4)
        config = deep_merge(config, {
            "scheduler": {"epochs": request["epochs"], "group_size": group_size},
            "batcher": {"batch_groups": request["batch_size"], "group_size": group_size},
            "metrics": {"progress": False},
        })  # fmt: skip
        if request.get("max_steps") is not None:
            config["max_steps"] = request["max_steps"]
        job = self._new("train", {}, data_id=info.data_id, max_steps=config.get("max_steps"),
                        rollouts_expected=info.train_lines * request["epochs"] * group_size)  # fmt: skip
        job_id = job.status.job_id
        checkpoint_dir = self._checkpoint_dir(request.get("checkpoint_dir"), job_id)
        # the job's own resources id, named by its tasks: runners resolve "latest" as the highest policy
        # version published, which on this long-lived broker can be an earlier job's (its engine is gone)
        config.update(run_id=job_id, checkpoint_dir=str(checkpoint_dir), resources_id=f"policy-{job_id}")
        config["scheduler"] = {**config["scheduler"], "resources_id": f"policy-{job_id}"}
        try:
            TrainerConfig.model_validate(config)
        except Exception as exc:
            del self.jobs[job_id]
            import shutil

            shutil.rmtree(job.dir, ignore_errors=True)
            raise bad_request(f"invalid trainer settings: {exc}", "bad_config") from None
        job.spec = {"data_id": info.data_id, "config": config, "checkpoint_dir": str(checkpoint_dir),
                    "eval_interval": eval_interval, "has_test": info.test_lines > 0}  # fmt: skip
        job.save()
        job.task = asyncio.create_task(self._train(job), name=f"job-{job_id}")
        return job.status

    def _checkpoint_dir(self, requested: Optional[str], job_id: str) -> Path:
        base = (self.root / "checkpoints").resolve()
        if not requested:
            return base / job_id
        path = (base / requested / job_id).resolve()
        if base not in path.parents:
            raise bad_request(f"checkpoint_dir {requested!r} leaves the server's checkpoint folder {base}")
        return path

    async def _train(self, job: Job) -> None:
        from agl_stream.adapter import TracerTraceToTriplet

        from agl_stream_trainer.config import TrainerConfig
        from agl_stream_trainer.rl import RL

        started = time.monotonic()
        spec = job.spec
        evaluations: list[EvalResult] = []

        def stopped(reason: str) -> None:  # the partial result: what was trained and evaluated so far
            job.result = TrainingResult(job_id=job.status.job_id, state="stopped", stop_reason=reason,
                                        steps=job.status.step, policy_version=job.status.policy_version,
                                        training_time_s=time.monotonic() - started, evaluations=evaluations).model_dump(mode="json")  # fmt: skip

        async with _running(job, on_stopped=stopped), contextlib.AsyncExitStack() as cleanup:
            train = await self.datasets.items(spec["data_id"], "train")
            test = await self.datasets.items(spec["data_id"], "test") if spec["has_test"] else []
            results = await RolloutResults(self.settings).start()
            cleanup.push_async_callback(results.stop)

            async def evaluate_at(step: int) -> None:
                evaluations.append(await self._evaluate_items(f"{job.status.job_id}-step{step}", test, results,
                                                              None, job.status.policy_version, step=step,
                                                              resources_id=spec["config"]["resources_id"]))  # fmt: skip

            sink = _StepSink(job, spec["eval_interval"] if test else None, evaluate_at)
            rl = RL(TrainerConfig.model_validate(spec["config"]), output_dir=job.dir / "run", validate_before=bool(test),
                    eval_timeout=self.eval_timeout, step_sinks=[sink])  # fmt: skip
            rl.bind(self.settings, self.client, adapter=TracerTraceToTriplet())
            report = await rl.run(train, test or None)
            if sink.pending:
                await asyncio.gather(*sink.pending, return_exceptions=True)
            history = await self._history(job.status.job_id, int(report.get("steps", 0)))
            job.result = TrainingResult(
                job_id=job.status.job_id, state="succeeded", stop_reason=report.get("stop_reason"),
                steps=int(report.get("steps", 0)), policy_version=int(report.get("policy_version", 0)),
                reward_curve=[p.reward_mean for p in history], loss_curve=[p.loss for p in history], history=history,
                training_time_s=time.monotonic() - started, evaluations=evaluations,
                validation={k: report[k] for k in ("val_before", "val_after", "validation", "validation_reward") if k in report},
            ).model_dump(mode="json")  # fmt: skip
            job.update(state="succeeded", stop_reason=report.get("stop_reason"), finished_at=time.time())

    async def _history(self, run_id: str, steps: int, timeout: float = 60.0) -> list[StepPoint]:
        """The run's ``training_steps`` rows, once the sinks have written all ``steps`` of them."""
        deadline = time.monotonic() + timeout
        while True:
            _, rows = await self.reader.query(
                "SELECT Step, PolicyVersion, RewardMean, RewardStd, Loss, toUnixTimestamp64Milli(Timestamp) "
                "FROM training_steps FINAL WHERE RunId = {r:String} ORDER BY Step", {"r": run_id})  # fmt: skip
            if len(rows) >= steps or time.monotonic() > deadline:
                if len(rows) < steps:
                    logger.warning("%s: %d of %d training steps reached ClickHouse in %.0fs", run_id, len(rows), steps, timeout)
                return [StepPoint(step=int(s), policy_version=int(v), reward_mean=float(m), reward_std=float(sd), loss=float(lo),
                                  timestamp=ts / 1000) for s, v, m, sd, lo, ts in rows]  # fmt: skip
            await asyncio.sleep(0.5)

    # ---------------------------------------------------------------- evaluation

    async def start_evaluation(self, request: dict[str, Any]) -> JobStatus:
        from agl_stream_trainer.server.datasets import parse_jsonl

        checkpoint = request.get("checkpoint", "latest")
        threshold = request.get("success_threshold", 1.0)
        if not isinstance(threshold, (int, float)):
            raise bad_request(f"success_threshold must be a number, got {threshold!r}")
        if checkpoint is not None:
            self.resolve(checkpoint)  # an unknown checkpoint is refused before anything starts
        if request.get("test") is not None:
            items = [json.loads(item) for _, item in parse_jsonl(request["test"], "test")]
            data_id = None
        else:
            info = await self.datasets.get(request.get("data_id"))
            if not info.test_lines:
                raise bad_request(f"{info.data_id} has no test split: upload one, or pass test_file", "no_test_split")
            items, data_id = await self.datasets.items(info.data_id, "test"), info.data_id
        job = self._new("evaluate", {"checkpoint": checkpoint, "items": items, "success_threshold": float(threshold)},
                        data_id=data_id, rollouts_expected=len(items))  # fmt: skip
        job.task = asyncio.create_task(self._evaluation(job), name=f"job-{job.status.job_id}")
        return job.status

    async def _evaluation(self, job: Job) -> None:
        from agl_stream.kafka import RecordProducer

        from agl_stream_trainer.config import EngineConfig
        from agl_stream_trainer.export import export_checkpoint
        from agl_stream_trainer.models import resolve_model_dir
        from agl_stream_trainer.publisher import WeightPublisher
        from agl_stream_trainer.service import start_engine

        closers: list[Any] = []
        spec = job.spec
        async with _running(job), contextlib.AsyncExitStack() as cleanup:
            cleanup.push_async_callback(_close_all, closers)  # the engine, last
            name = spec["checkpoint"]
            if name is None:
                model_dir, version = await asyncio.to_thread(resolve_model_dir, self.trainer_config["model"]), 0
            else:
                path, base_model, info = self.resolve(name)
                model_dir = self.root / "exports" / info.name / "huggingface"
                if not model_dir.exists():
                    await asyncio.to_thread(export_checkpoint, path, base_model, model_dir, "huggingface")
                name, version = info.name, info.policy_version
            job.update(policy_version=version)
            engine_config = EngineConfig.model_validate(self.trainer_config.get("engine") or {})
            engine = await start_engine(self.settings, engine_config, model_dir, "policy", closers)
            producer = await RecordProducer(self.settings).start()
            cleanup.push_async_callback(producer.stop)
            resources_id = f"eval-{job.status.job_id}"
            publisher = WeightPublisher(engine, producer, self.settings, resources_id=resources_id,
                                        sampling_parameters=self.trainer_config.get("sampling_parameters"))  # fmt: skip
            await publisher.announce(version)
            results = await RolloutResults(self.settings).start()
            cleanup.push_async_callback(results.stop)
            result = await self._evaluate_items(job.status.job_id, spec["items"], results, name, version,
                                                resources_id=resources_id, threshold=spec["success_threshold"])  # fmt: skip
            job.result = result.model_dump(mode="json")
            job.update(state="succeeded", reward_mean=result.mean_reward, finished_at=time.time())

    async def _evaluate_items(self, eval_id: str, items: list[dict[str, Any]], results: RolloutResults,
                              checkpoint: Optional[str], version: int, *, resources_id: Optional[str] = None,
                              threshold: float = 1.0, step: Optional[int] = None) -> EvalResult:  # fmt: skip
        started = time.monotonic()
        outcomes = await run_dataset(self.client, results, items, mode="val", resources_id=resources_id,
                                     metadata={"eval": eval_id}, timeout=self.eval_timeout)  # fmt: skip
        rewards = [o.final_reward if o is not None and o.status == "succeeded" and o.final_reward is not None else 0.0
                   for o in outcomes]  # fmt: skip
        graded = [r for item, r in zip(items, rewards) if item.get("ground_truth") is not None]
        return EvalResult(
            eval_id=eval_id, checkpoint=checkpoint, policy_version=version, n=len(items),
            mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            accuracy=sum(r >= threshold for r in graded) / len(graded) if graded else None,
            n_with_ground_truth=len(graded), success_threshold=threshold,
            failed=sum(o is not None and o.status != "succeeded" for o in outcomes), missing=sum(o is None for o in outcomes),
            rewards=rewards, step=step, duration_s=time.monotonic() - started,
        )  # fmt: skip

    # ---------------------------------------------------------------- control

    async def stop(self, job_id: str, reason: str = "stopped by the client") -> JobStatus:
        job = self.get(job_id)
        if job.task is not None and not job.task.done():
            job.stopping = reason
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)
        return job.status

    def result(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        if not job.status.done:
            raise conflict(f"job {job_id} is {job.status.state}; its result comes when it ends", "not_done")
        if job.result is None:
            raise ServiceError(409, "no_result", f"job {job_id} {job.status.state}: {job.status.error or 'no result'}")
        if job.status.kind != "train":
            return job.result
        # the checkpoints as they are now (the learner keeps the last few; a restart keeps them all)
        checkpoints = self.checkpoints(job_id)
        return {**job.result, "checkpoints": [c.model_dump(mode="json") for c in checkpoints],
                "final_checkpoint": checkpoints[-1].name if checkpoints else None}  # fmt: skip

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        for job in self.jobs.values():
            if job.task is not None and not job.task.done():
                job.stopping = "the server stopped"
                job.task.cancel()
                await asyncio.gather(job.task, return_exceptions=True)


@contextlib.asynccontextmanager
async def _running(job: Job, on_stopped: Optional[Callable[[str], None]] = None) -> AsyncIterator[None]:
    """A job's run: ``running`` while the body runs, then ``stopped`` (cancelled: the client's stop, a silent
    client or the server's shutdown), ``failed`` (with the error) or whatever the body set; saved either way.
    The body's own clean-up (an exit stack inside) runs first."""
    job.update(state="running")
    job.save()
    try:
        yield
    except asyncio.CancelledError:
        reason = job.stopping or "the server stopped"
        job.update(state="stopped", stop_reason=reason, finished_at=time.time())
        if on_stopped is not None:
            on_stopped(reason)
    except Exception as exc:
        logger.exception("job %s failed", job.status.job_id)
        job.update(state="failed", error=f"{type(exc).__name__}: {exc}", finished_at=time.time())
    finally:
        job.save()


async def _close_all(closers: list[Any]) -> None:
    """Call ``closers`` in reverse order, awaiting those that are coroutines (the engine's are)."""
    for close in reversed(closers):
        outcome = close()
        if asyncio.iscoroutine(outcome):
            await outcome
