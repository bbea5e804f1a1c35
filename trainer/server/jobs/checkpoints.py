"""The checkpoint catalogue: what the learner wrote under ``<root>/checkpoints/<job_id>`` (or a job's
``checkpoint_dir``), named ``<job_id>/step-NNNNNNNN``, and where a job's checkpoints go."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from agl_stream.training_service.types import CheckpointInfo

from agl_stream_trainer.export import list_checkpoints, resolve_checkpoint
from agl_stream_trainer.server.errors import ServiceError, bad_request, conflict, not_found
from agl_stream_trainer.server.jobs.record import Job
from agl_stream_trainer.server.jobs.registry import JobRegistry


class CheckpointCatalogue(JobRegistry):
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

    def _checkpoint_dir(self, requested: Optional[str], job_id: str) -> Path:
        base = (self.root / "checkpoints").resolve()
        if not requested:
            return base / job_id
        path = (base / requested / job_id).resolve()
        if base not in path.parents:
            raise bad_request(f"checkpoint_dir {requested!r} leaves the server's checkpoint folder {base}")
        return path

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
