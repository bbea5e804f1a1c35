"""A fake Kubernetes API server for the controller's Jobs: the routes it uses, each Job checked and really run.

- ``POST /apis/batch/v1/namespaces/{ns}/jobs`` checks the Job against the Kubernetes API's schema
  (``kubernetes-validate``, strict: an unknown field is an error) and answers 422 with the errors, as a real
  API server's validation does; a valid Job's first container command runs as a local process with the
  container's env (and PATH), its stdout and stderr as the pod's log; ``activeDeadlineSeconds`` stops it
  (``DeadlineExceeded``); a ``memory`` limit is not enforced, but a command may exit 137 with
  ``AGL_FAKE_OOM`` set to be reported ``OOMKilled`` as the kubelet reports it.
- ``GET .../jobs/{name}``, ``.../jobs/{name}/status``, ``DELETE .../jobs/{name}`` (the process killed, the
  Job and its pod gone), ``GET /api/v1/namespaces/{ns}/pods?labelSelector=job-name=X``, ``.../pods/{p}/log``.

No cluster exists on the build machines; this is what the controller's Kubernetes mode is tested against.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

import kubernetes_validate
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

K8S_VERSION = "1.30"  # as tests/deploy/test_manifests.py


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeJob:
    manifest: dict[str, Any]
    process: Optional[asyncio.subprocess.Process] = None
    log: bytearray = field(default_factory=bytearray)
    exit_code: Optional[int] = None
    reason: Optional[str] = None  # the Job's Failed reason (BackoffLimitExceeded, DeadlineExceeded)
    pod_reason: Optional[str] = None  # the container's terminated reason (Completed, Error, OOMKilled)
    runner: Optional["asyncio.Task[None]"] = None
    finished_at: Optional[float] = None

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    def status(self) -> dict[str, Any]:
        if self.exit_code is None and self.reason is None:
            return {"active": 1, "startTime": self.manifest["metadata"]["creationTimestamp"]}
        if self.exit_code == 0:
            return {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        return {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": self.reason or "BackoffLimitExceeded"}]}

    def pod(self) -> dict[str, Any]:
        template = self.manifest["spec"]["template"]
        state: dict[str, Any] = {"running": {}}
        if self.exit_code is not None:
            state = {"terminated": {"exitCode": self.exit_code, "reason": self.pod_reason or ("Completed" if self.exit_code == 0 else "Error")}}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{self.name}-pod", "namespace": self.manifest["metadata"]["namespace"],
                         "labels": {**(template.get("metadata") or {}).get("labels", {}), "job-name": self.name},
                         "creationTimestamp": self.manifest["metadata"]["creationTimestamp"]},
            "spec": template["spec"],
            "status": {"phase": "Running" if self.exit_code is None else ("Succeeded" if self.exit_code == 0 else "Failed"),
                       "containerStatuses": [{"name": template["spec"]["containers"][0]["name"], "ready": False,
                                              "restartCount": 0, "image": template["spec"]["containers"][0]["image"],
                                              "imageID": "", "state": state}]},
        }  # fmt: skip


def create_fake_kube(token: str) -> FastAPI:
    app = FastAPI()
    jobs: dict[tuple[str, str], FakeJob] = {}
    app.state.jobs = jobs
    app.state.created = []  # every Job posted, as posted
    app.state.refused = []  # schema errors of Jobs refused
    app.state.deleted = []  # (name, propagationPolicy)

    def authorized(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {token}"

    def status(code: int, reason: str, message: str) -> JSONResponse:
        return JSONResponse({"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message,
                             "reason": reason, "code": code}, status_code=code)  # fmt: skip

    async def run(job: FakeJob) -> None:
        container = job.manifest["spec"]["template"]["spec"]["containers"][0]
        env = {"PATH": os.environ.get("PATH", "")}
        env.update({e["name"]: e.get("value", "") for e in container.get("env") or []})
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        job.process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                           stderr=asyncio.subprocess.STDOUT, start_new_session=True)  # fmt: skip
        deadline = job.manifest["spec"].get("activeDeadlineSeconds")

        async def read() -> None:
            assert job.process is not None and job.process.stdout is not None
            while chunk := await job.process.stdout.read(4096):
                job.log += chunk

        reader = asyncio.create_task(read())
        try:
            code = await asyncio.wait_for(job.process.wait(), deadline)
        except asyncio.TimeoutError:
            os.killpg(job.process.pid, signal.SIGKILL)
            await job.process.wait()
            await reader
            job.exit_code, job.reason, job.pod_reason = 137, "DeadlineExceeded", "DeadlineExceeded"
        else:
            await reader
            job.pod_reason = "OOMKilled" if code == 137 and env.get("AGL_FAKE_OOM") else None
            job.exit_code = code
            job.reason = None if code == 0 else "BackoffLimitExceeded"
        job.finished_at = time.time()

    @app.post("/apis/batch/v1/namespaces/{namespace}/jobs")
    async def create(namespace: str, request: Request) -> JSONResponse:
        if not authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        manifest = await request.json()
        try:
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            app.state.refused.append(str(exc))
            return status(422, "Invalid", f"Job is invalid: {exc}")
        app.state.created.append(manifest)
        name = manifest["metadata"]["name"]
        if (namespace, name) in jobs:
            return status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
        manifest["metadata"].update(namespace=namespace, uid=f"uid-{len(app.state.created)}", creationTimestamp=_now())
        job = jobs[(namespace, name)] = FakeJob(manifest)
        job.runner = asyncio.create_task(run(job))
        return JSONResponse({**manifest, "status": {}}, status_code=201)

    def found(namespace: str, name: str, request: Request) -> FakeJob | JSONResponse:
        if not authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        job = jobs.get((namespace, name))
        return job if job is not None else status(404, "NotFound", f'jobs.batch "{name}" not found')

    @app.get("/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    @app.get("/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status")
    async def read(namespace: str, name: str, request: Request) -> JSONResponse:
        job = found(namespace, name, request)
        if isinstance(job, JSONResponse):
            return job
        return JSONResponse({**job.manifest, "status": job.status()})

    @app.delete("/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    async def delete(namespace: str, name: str, request: Request) -> JSONResponse:
        job = found(namespace, name, request)
        if isinstance(job, JSONResponse):
            return job
        body = await request.body()
        policy = request.query_params.get("propagationPolicy")
        if body:
            policy = (await request.json()).get("propagationPolicy", policy)
        app.state.deleted.append((name, policy))
        if job.process is not None and job.process.returncode is None:
            os.killpg(job.process.pid, signal.SIGKILL)
        if job.runner is not None:
            await asyncio.gather(job.runner, return_exceptions=True)
        del jobs[(namespace, name)]
        return JSONResponse({"apiVersion": "v1", "kind": "Status", "status": "Success"})

    @app.get("/api/v1/namespaces/{namespace}/pods")
    async def pods(namespace: str, request: Request, labelSelector: str = "") -> JSONResponse:  # noqa: N803 (the API's name)
        if not authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        wanted = labelSelector.removeprefix("job-name=")
        items = [job.pod() for (ns, name), job in jobs.items() if ns == namespace and name == wanted]
        return JSONResponse({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})

    @app.get("/api/v1/namespaces/{namespace}/pods/{pod}/log")
    async def log(namespace: str, pod: str, request: Request) -> PlainTextResponse:
        if not authorized(request):
            return PlainTextResponse("Unauthorized", status_code=401)
        job = jobs.get((namespace, pod.removesuffix("-pod")))
        if job is None:
            return PlainTextResponse("not found", status_code=404)
        return PlainTextResponse(job.log.decode(errors="replace"))

    return app
