"""The jobs the server knows (loaded from their records at start), one running at a time, and the watchdog that
stops a job whose client went silent (its runners are the client's: without them its rollouts wait forever)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path
from typing import Any, Optional

from agl_stream.client import StoreClient
from agl_stream.client.clickhouse_reader import ClickHouseReader
from agl_stream.config import Settings
from agl_stream.training_service.types import ClusterInfo, JobStatus

from agl_stream_trainer.server.datasets import DatasetStore
from agl_stream_trainer.server.errors import conflict, not_found
from agl_stream_trainer.server.jobs.record import Job

logger = logging.getLogger(__name__)


class JobRegistry:
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

    def _busy(self) -> Optional[Job]:
        return next((j for j in self.jobs.values() if not j.status.done), None)

    def _new(self, kind: str, spec: dict[str, Any], **fields: Any) -> Job:
        busy = self._busy()
        if busy is not None:
            raise conflict(f"job {busy.status.job_id} ({busy.status.kind}) is running; one job runs at a time", "busy")
        job_id = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        status = JobStatus(job_id=job_id, kind=kind, state="queued", created_at=time.time(), cluster=self.cluster, **fields)  # type: ignore[arg-type]
        job = self.jobs[job_id] = Job(self.root / "jobs", status, spec)
        job.save()
        return job

    # ---------------------------------------------------------------- control

    async def stop(self, job_id: str, reason: str = "stopped by the client") -> JobStatus:
        job = self.get(job_id)
        if job.task is not None and not job.task.done():
            job.stopping = reason
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)
        return job.status

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        for job in self.jobs.values():
            if job.task is not None and not job.task.done():
                job.stopping = "the server stopped"
                job.task.cancel()
                await asyncio.gather(job.task, return_exceptions=True)

