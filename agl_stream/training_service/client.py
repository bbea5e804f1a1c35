"""``Client(server_url)``: upload data, train, evaluate and download the model of an ``agl-stream server``.

The agent never leaves the caller's machine: ``train`` and ``evaluate`` start ``nworkers`` runner
processes here (``agl-stream runner``, as ``Trainer.fit`` does) that consume the server's task topic
and call ``agent_func(resource, task)`` against the inference server the server announces. The server
schedules the tasks, trains, checkpoints and serves the weights. Every request carries the server's
bearer token (``token=`` or ``AGL_SERVER_TOKEN``); connection errors and 502/503/504 answers are
retried ``max_retries`` times with backoff; any other error answer raises one
:class:`TrainingServiceError` with the server's message.
"""

from __future__ import annotations

import logging
import os
import signal
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from tenacity import RetryCallState

from agl_stream.config import Settings, env_name

from agl_stream.service import Backoff, retrying_blocking
from agl_stream.training_service.agent import AgentFunc, ServiceAgent
from agl_stream.training_service.types import (
    CheckpointInfo,
    ClusterInfo,
    DatasetInfo,
    EvalResult,
    JobStatus,
    TrainingResult,
    TrainingServiceError,
)

logger = logging.getLogger(__name__)

TOKEN_ENV = env_name("server_token")
RETRY_STATUSES = (502, 503, 504)


class _RetryAnswer(Exception):
    """A 502/503/504 answer, raised to be retried (kept for its error when the tries run out)."""

    def __init__(self, response: Any) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
EXPORT_FORMATS = ("huggingface", "safetensors", "onnx")


class Client:
    def __init__(
        self,
        server_url: str,
        timeout: float = 300.0,
        max_retries: int = 3,
        verify_ssl: bool = True,
        *,
        token: Optional[str] = None,
        poll_interval: float = 1.0,
        data_dir: Optional[Path] = None,
        transport: Any = None,
    ) -> None:
        """``token``: the server's bearer token (default ``AGL_SERVER_TOKEN``); ``data_dir``: where the
        local runner processes keep their logs and components file (default ``AGL_DATA_DIR``);
        ``transport``: an ``httpx.BaseTransport`` to send requests through (tests, proxies)."""
        import httpx

        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.server_url = server_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.verify_ssl = verify_ssl
        self.poll_interval = poll_interval
        self.retry_delay = 0.5  # seconds before the first retry, doubling up to 8
        self.data_dir = data_dir
        token = token if token is not None else Settings.from_env().server_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.server_url, timeout=timeout, verify=verify_ssl, headers=headers,
                                  transport=transport)  # fmt: skip

    # ---------------------------------------------------------------- transport

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, *, stream: bool = False, **kwargs: Any) -> Any:
        """The response to a request, retried on connection errors and 502/503/504; ``stream``: the body is
        left unread (the caller reads it and closes the response)."""
        import httpx

        def release(state: RetryCallState) -> None:  # a retried answer's connection goes back to the pool
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, _RetryAnswer):
                error.response.close()

        try:
            for attempt in retrying_blocking(f"{method} {path}", backoff=Backoff(self.retry_delay, 8.0),
                                             attempts=self.max_retries + 1, before_sleep=release,
                                             retry_if=lambda exc: isinstance(exc, (httpx.TransportError, _RetryAnswer))):  # fmt: skip
                with attempt:
                    response = self._http.send(self._http.build_request(method, path, **kwargs), stream=stream)
                    if response.status_code in RETRY_STATUSES:
                        raise _RetryAnswer(response)
        except httpx.TransportError as exc:
            raise TrainingServiceError(f"cannot reach the training server at {self.server_url}: {exc}",
                                       code="unreachable") from exc  # fmt: skip
        except _RetryAnswer as exc:
            return self._checked(exc.response)  # the last answer, still 502/503/504: its error
        return self._checked(response)

    @staticmethod
    def _checked(response: Any) -> Any:
        if response.status_code < 400:
            return response
        response.read()  # a streamed error answer: its body is the message
        response.close()
        try:
            error = response.json().get("error") or {}
            message, code = error.get("message") or response.text, error.get("code") or "error"
        except ValueError:
            message, code = response.text or response.reason_phrase, "error"
        raise TrainingServiceError(f"{message} (HTTP {response.status_code})", status=response.status_code, code=code)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    # ---------------------------------------------------------------- data, checkpoints, jobs

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/v1/health")

    def upload_data(self, train_file: Union[str, Path], test_file: Union[str, Path, None] = None,
                    data_id: Optional[str] = None) -> str:  # fmt: skip
        """Upload JSONL files (one object a line: ``question``, optional ``ground_truth``, any other
        fields); returns the ``data_id``. The server refuses a bad line with its number and keeps nothing."""
        body: dict[str, Any] = {"data_id": data_id, **_file_field("train", train_file)}
        if test_file is not None:
            body.update(_file_field("test", test_file))
        return DatasetInfo.model_validate(self._json("POST", "/v1/data", json=body)).data_id

    def list_data(self) -> list[DatasetInfo]:
        return [DatasetInfo.model_validate(d) for d in self._json("GET", "/v1/data")]

    def list_checkpoints(self, job_id: Optional[str] = None) -> list[CheckpointInfo]:
        params = {"job_id": job_id} if job_id else None
        return [CheckpointInfo.model_validate(c) for c in self._json("GET", "/v1/checkpoints", params=params)]

    def list_jobs(self) -> list[JobStatus]:
        return [JobStatus.model_validate(j) for j in self._json("GET", "/v1/jobs")]

    def job(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(self._json("GET", f"/v1/jobs/{job_id}"))

    def stop(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(self._json("POST", f"/v1/jobs/{job_id}/stop"))

    def result(self, job_id: str) -> dict[str, Any]:
        """A finished job's result as the server sends it (a TrainingResult's or an EvalResult's fields)."""
        return self._json("GET", f"/v1/jobs/{job_id}/result")

    def training_result(self, job_id: str) -> TrainingResult:
        return TrainingResult.model_validate(self._json("GET", f"/v1/jobs/{job_id}/result"))

    def eval_result(self, job_id: str) -> EvalResult:
        return EvalResult.model_validate(self._json("GET", f"/v1/jobs/{job_id}/result"))

    # ---------------------------------------------------------------- train / evaluate

    def train(
        self,
        agent_func: AgentFunc,
        nworkers: int = 1,
        epochs: int = 1,
        batch_size: int = 2,
        data_id: Optional[str] = None,
        checkpoint_dir: Optional[str] = None,
        eval_interval: Optional[int] = None,
        *,
        group_size: Optional[int] = None,
        max_steps: Optional[int] = None,
        config: Optional[dict[str, Any]] = None,
        concurrency: int = 1,
        progress: bool = True,
    ) -> TrainingResult:
        """Train on ``data_id`` (default: the latest upload) with ``agent_func`` running here.

        ``batch_size``: tasks per learner step, each answered ``group_size`` times (the GRPO group);
        ``eval_interval``: evaluate the test split every N steps; ``checkpoint_dir``: where the server
        keeps this job's checkpoints, under its own data directory; ``config``: trainer settings
        (``trainer.yaml`` keys) merged over the server's. Ctrl-C stops the job on the server and the
        local runners, and returns what was trained so far (``state == "stopped"``)."""
        body = {
            "data_id": data_id, "epochs": epochs, "batch_size": batch_size, "eval_interval": eval_interval,
            "checkpoint_dir": checkpoint_dir, "group_size": group_size, "max_steps": max_steps, "config": config or {},
        }  # fmt: skip
        job = JobStatus.model_validate(self._json("POST", "/v1/jobs/train", json=body))
        self._run_with_runners(job, agent_func, nworkers, concurrency, progress, f"training {job.data_id}")
        return self.training_result(job.job_id)

    def evaluate(
        self,
        agent_func: AgentFunc,
        test_file: Union[str, Path, None] = None,
        checkpoint: Optional[str] = "latest",
        nworkers: int = 1,
        *,
        data_id: Optional[str] = None,
        success_threshold: float = 1.0,
        concurrency: int = 1,
        progress: bool = True,
    ) -> EvalResult:
        """Answer ``test_file`` (or ``data_id``'s test split) with ``checkpoint``'s weights ("latest",
        a name from :meth:`list_checkpoints`, or None for the base model); returns the mean reward and,
        over tasks with a ``ground_truth``, the accuracy (reward at least ``success_threshold``)."""
        body: dict[str, Any] = {"data_id": data_id, "checkpoint": checkpoint, "success_threshold": success_threshold}
        if test_file is not None:
            body.update(_file_field("test", test_file))
        job = JobStatus.model_validate(self._json("POST", "/v1/jobs/evaluate", json=body))
        self._run_with_runners(job, agent_func, nworkers, concurrency, progress, f"evaluating {checkpoint or 'base model'}")
        return self.eval_result(job.job_id)

    def _run_with_runners(self, job: JobStatus, agent_func: AgentFunc, nworkers: int, concurrency: int,
                          progress: bool, title: str) -> JobStatus:  # fmt: skip
        from agl_stream.training_service.runners import LocalRunners

        if job.cluster is None:
            raise TrainingServiceError(f"job {job.job_id}: the server named no cluster for the runners")
        runners = LocalRunners(job.cluster, ServiceAgent(agent_func), data_dir=self.data_dir)
        previous = signal.getsignal(signal.SIGINT)
        try:
            runners.start(nworkers, concurrency)
            return self._follow(job, runners, progress, title)
        except KeyboardInterrupt:
            logger.warning("interrupted: stopping job %s on the server", job.job_id)
            self.stop(job.job_id)
            return self._wait_done(job.job_id)
        finally:
            runners.stop()
            signal.signal(signal.SIGINT, previous)

    def _statuses(self, job_id: str) -> Iterator[JobStatus]:
        while True:
            status = self.job(job_id)
            yield status
            if status.done:
                return
            time.sleep(self.poll_interval)

    def _wait_done(self, job_id: str) -> JobStatus:
        for status in self._statuses(job_id):
            last = status
        return last

    def _follow(self, job: JobStatus, runners: Any, progress: bool, title: str) -> JobStatus:
        from agl_stream.training_service.job_display import JobProgress

        with JobProgress(title, enabled=progress) as display:
            for status in self._statuses(job.job_id):
                runners.check()
                display.update(status)
                last = status
        if last.state == "failed":
            raise TrainingServiceError(f"job {last.job_id} failed on the server: {last.error}", code="job_failed")
        return last

    # ---------------------------------------------------------------- the model

    def download_model(self, output_dir: Union[str, Path], checkpoint: str = "latest", format: str = "huggingface",
                       *, overwrite: bool = False) -> Path:  # fmt: skip
        """Write ``checkpoint``'s policy to ``output_dir``: "huggingface" (``from_pretrained`` loads it),
        "safetensors" (weights and config only) or "onnx" (refused with the reason where it cannot be made)."""
        if format not in EXPORT_FORMATS:
            raise ValueError(f"unknown format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}")
        target = Path(output_dir)
        if target.exists() and any(target.iterdir()) and not overwrite:
            raise FileExistsError(f"{target} is not empty; pass overwrite=True to replace it")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
            folder = Path(tmp) / "model"
            archive_path = Path(tmp) / "model.tar.gz"
            response = self._send("GET", "/v1/model", params={"checkpoint": checkpoint, "format": format}, stream=True)
            try:  # to disk as it arrives: a model is hundreds of MB
                with archive_path.open("wb") as fh:
                    for chunk in response.iter_bytes(1 << 20):
                        fh.write(chunk)
            finally:
                response.close()
            with tarfile.open(archive_path, mode="r:gz") as archive:
                archive.extractall(folder, filter="data")  # refuses absolute paths, links out and devices
            if target.exists():
                import shutil

                shutil.rmtree(target)
            os.replace(folder, target)
        return target


def _file_field(split: str, path: Union[str, Path]) -> dict[str, str]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TrainingServiceError(f"cannot read {split} file {path}: {exc}", code="bad_file") from exc
    return {split: text, f"{split}_file": path.name}


__all__ = ["Client", "ClusterInfo", "TOKEN_ENV"]
