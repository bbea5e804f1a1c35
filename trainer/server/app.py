"""The training server's HTTP API (FastAPI): every route but ``/v1/health`` needs the bearer token."""

from __future__ import annotations

import asyncio
import tarfile
from pathlib import Path
from typing import Any, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from agl_stream.service import TokenVerdict, add_health_routes, always_healthy, presented_token, token_verdict
from agl_stream.training_service.types import CheckpointInfo, DatasetInfo, JobStatus

from agl_stream_trainer.server.datasets import DatasetStore
from agl_stream_trainer.server.errors import ServiceError, bad_request
from agl_stream_trainer.server.jobs import JobManager

EXPORT_FORMATS = ("huggingface", "safetensors", "onnx")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UploadRequest(_Request):
    data_id: Optional[str] = None
    train: str
    train_file: str = ""
    test: Optional[str] = None
    test_file: str = ""


class TrainRequest(_Request):
    data_id: Optional[str] = None
    epochs: int = 1
    batch_size: int = 2
    eval_interval: Optional[int] = None
    checkpoint_dir: Optional[str] = None
    group_size: Optional[int] = None
    max_steps: Optional[int] = Field(default=None, ge=1)
    config: dict[str, Any] = Field(default_factory=dict)


class EvaluateRequest(_Request):
    data_id: Optional[str] = None
    checkpoint: Optional[str] = "latest"
    test: Optional[str] = None
    test_file: str = ""
    success_threshold: float = 1.0


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(datasets: DatasetStore, jobs: JobManager, token: str, export_root: Path) -> FastAPI:
    app = FastAPI(title="agl-stream training server", version="1")

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors())
        return _error(400, "bad_request", problems)

    def authorized(request: Request) -> None:
        if token_verdict(presented_token(request.headers), token) is not TokenVerdict.ACCEPTED:
            raise ServiceError(401, "unauthorized", "missing or wrong bearer token (the server's AGL_SERVER_TOKEN)")

    auth = [Depends(authorized)]

    add_health_routes(app, always_healthy(), ["/v1/health"])

    @app.get("/v1/data", dependencies=auth)
    async def list_data() -> list[DatasetInfo]:
        return await datasets.list()

    @app.post("/v1/data", dependencies=auth, status_code=201)
    async def upload(body: UploadRequest) -> DatasetInfo:
        return await datasets.upload(body.train, body.train_file, body.test, body.test_file, body.data_id)

    @app.get("/v1/checkpoints", dependencies=auth)
    async def checkpoints(job_id: Optional[str] = None) -> list[CheckpointInfo]:
        return jobs.checkpoints(job_id)

    @app.get("/v1/jobs", dependencies=auth)
    async def list_jobs() -> list[JobStatus]:
        return [job.status for job in jobs.jobs.values()]

    @app.post("/v1/jobs/train", dependencies=auth, status_code=201)
    async def train(body: TrainRequest) -> JobStatus:
        return await jobs.start_training(body.model_dump())

    @app.post("/v1/jobs/evaluate", dependencies=auth, status_code=201)
    async def evaluate(body: EvaluateRequest) -> JobStatus:
        return await jobs.start_evaluation(body.model_dump())

    @app.get("/v1/jobs/{job_id}", dependencies=auth)
    async def job(job_id: str) -> JobStatus:
        return jobs.get(job_id).status

    @app.post("/v1/jobs/{job_id}/stop", dependencies=auth)
    async def stop(job_id: str) -> JobStatus:
        return await jobs.stop(job_id)

    @app.get("/v1/jobs/{job_id}/result", dependencies=auth)
    async def result(job_id: str) -> dict[str, Any]:
        return jobs.result(job_id)

    @app.get("/v1/model", dependencies=auth)
    async def model(checkpoint: str = "latest", format: str = "huggingface") -> FileResponse:
        if format not in EXPORT_FORMATS:
            raise bad_request(f"unknown format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}", "bad_format")
        archive = await asyncio.to_thread(_export_archive, jobs, export_root, checkpoint, format)
        return FileResponse(archive, media_type="application/gzip", filename=archive.name)

    return app


def _export_archive(jobs: JobManager, root: Path, checkpoint: str, format: str) -> Path:
    """The checkpoint exported in ``format`` as a .tar.gz, made once and kept (checkpoints do not change)."""
    from agl_stream_trainer.export import ExportFormatUnavailable, export_checkpoint

    path, base_model, info = jobs.resolve(checkpoint)
    archive = root / info.name / f"{format}.tar.gz"
    if archive.exists():
        return archive
    folder = root / info.name / format
    try:
        if not folder.exists():
            export_checkpoint(path, base_model, folder, format)  # type: ignore[arg-type]
    except ExportFormatUnavailable as exc:
        raise ServiceError(422, "format_unavailable", str(exc)) from None
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for file in sorted(folder.rglob("*")):
            tar.add(file, arcname=str(file.relative_to(folder)), recursive=False)
    tmp.replace(archive)
    return archive
