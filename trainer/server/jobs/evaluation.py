"""Evaluation jobs: a checkpoint (or the base model) served by an engine of its own, the test items run through
the client's runners, rewards and accuracy as the result. Training jobs evaluate through the same code."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, Optional

from agl_stream.algorithm import RolloutResults, run_dataset
from agl_stream.training_service.types import EvalResult, JobStatus

from agl_stream_trainer.server.errors import bad_request
from agl_stream_trainer.server.jobs.checkpoints import CheckpointCatalogue
from agl_stream_trainer.server.jobs.record import Job, close_all, running


class EvaluationJobs(CheckpointCatalogue):
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
        async with running(job), contextlib.AsyncExitStack() as cleanup:
            cleanup.push_async_callback(close_all, closers)  # the engine, last
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
