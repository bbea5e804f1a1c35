"""A job's record (``<root>/jobs/<job_id>/job.json``, rewritten at every state change) and the context its run
goes through: ``running``, then ``stopped``, ``failed`` or what the run set, saved either way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional

from agl_stream.training_service.types import JobStatus

logger = logging.getLogger(__name__)


def interrupted(status: JobStatus) -> JobStatus:
    if status.done:
        return status
    return status.model_copy(update={"state": "failed", "error": "the server stopped while the job ran"})


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
        job = cls(root, interrupted(JobStatus.model_validate(doc["status"])), doc.get("spec") or {})
        job.result = doc.get("result")
        return job


@contextlib.asynccontextmanager
async def running(job: Job, on_stopped: Optional[Callable[[str], None]] = None) -> AsyncIterator[None]:
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


async def close_all(closers: list[Any]) -> None:
    """Call ``closers`` in reverse order, awaiting those that are coroutines (the engine's are)."""
    for close in reversed(closers):
        outcome = close()
        if asyncio.iscoroutine(outcome):
            await outcome
