"""Training jobs: one ``RL`` run over a dataset's train split, with live progress, ``eval_interval`` evaluations
and the run's step history as its result."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Optional

from agl_stream.algorithm import RolloutResults
from agl_stream.training_service.types import EvalResult, JobStatus, StepPoint, TrainingResult

from agl_stream_trainer.server.errors import bad_request
from agl_stream_trainer.server.jobs.evaluation import EvaluationJobs
from agl_stream_trainer.server.jobs.record import Job, running

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


class TrainingJobs(EvaluationJobs):
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

        async with running(job, on_stopped=stopped), contextlib.AsyncExitStack() as cleanup:
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
                shortfall=report.get("shortfall"), steps=int(report.get("steps", 0)), policy_version=int(report.get("policy_version", 0)),
                reward_curve=[p.reward_mean for p in history], loss_curve=[p.loss for p in history], history=history,
                training_time_s=time.monotonic() - started, evaluations=evaluations,
                validation={k: report[k] for k in ("val_before", "val_after", "validation", "validation_reward") if k in report},
            ).model_dump(mode="json")  # fmt: skip
            job.update(state="succeeded", stop_reason=report.get("stop_reason"), shortfall=report.get("shortfall"),
                       finished_at=time.time())  # fmt: skip

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
