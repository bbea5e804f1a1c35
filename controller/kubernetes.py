"""Kubernetes mode: one Job per attempt, from the user's Job template, followed to its end.

For each attempt the controller:
- copies the template (a ``batch/v1`` Job manifest) and names it after the attempt (``agl-<attempt id>``),
  labelled with the rollout and attempt ids;
- injects the attempt's variables into every container (the same as a local command gets, less what lives
  on the controller's disk: the task comes as ``AGL_TASK_JSON``, and the reward through ``AGL_EVENT_URL``);
- sets ``activeDeadlineSeconds`` (the timeout), ``backoffLimit: 0`` (retries are the rollout's, decided by the
  state machine and run as new attempts, never as pod restarts under the same attempt),
  ``ttlSecondsAfterFinished`` (the cluster deletes finished Jobs) and ``restartPolicy: Never``;
- polls the Job's status to its end, keeps the pod's log (capped) beside the local mode's, and maps the end
  to a :class:`~agl_stream_controller.launch.ProcessResult` (exit code, ``DeadlineExceeded``, ``OOMKilled``);
- deletes the Job (and its pods, ``propagationPolicy: Background``) when the attempt is cancelled (the
  controller stopping, the rollout's timeout) or the controller could not follow it.

There is no cluster on the build machines: the tests run this against a fake API server that checks every
Job it is given against the Kubernetes API's schema and runs the Job's container command as a local process
(``tests/controller/fake_kube.py``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from agl_stream_controller.launch import ProcessResult

logger = logging.getLogger(__name__)

#: labels every Job carries (what an operator selects attempts' Jobs by)
ROLLOUT_LABEL = "agl-stream.io/rollout-id"
ATTEMPT_LABEL = "agl-stream.io/attempt-id"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
#: the exit status a result reports for a Job ended by its deadline, as a timed-out local command
DEADLINE_EXCEEDED = "DeadlineExceeded"


class JobTemplateError(ValueError):
    """The user's Job template cannot make an attempt's Job."""


def job_name(attempt_id: str) -> str:
    """A DNS-1123 name for the attempt's Job (attempt ids are unique, so names are too)."""
    name = "agl-" + re.sub(r"[^a-z0-9-]+", "-", attempt_id.lower()).strip("-")
    return name[:63].rstrip("-")


def build_job(template: Mapping[str, Any], *, name: str, rollout_id: str, attempt_id: str, env: Mapping[str, str],
              timeout_seconds: Optional[float], ttl_seconds: int, argv: Optional[list[str]] = None,
              memory_bytes: Optional[int] = None) -> dict[str, Any]:  # fmt: skip
    """The attempt's Job: ``template`` with the name, labels, variables and bounds set (see the module doc)."""
    if template.get("apiVersion") != "batch/v1" or template.get("kind") != "Job":
        raise JobTemplateError("the template must be a batch/v1 Job manifest")
    job = copy.deepcopy(dict(template))
    labels = {ROLLOUT_LABEL: _label_value(rollout_id), ATTEMPT_LABEL: _label_value(attempt_id),
              MANAGED_LABEL: "agl-stream-controller"}  # fmt: skip
    metadata = job.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = name
    metadata.setdefault("labels", {}).update(labels)
    spec = job.setdefault("spec", {})
    spec["backoffLimit"] = 0
    spec["ttlSecondsAfterFinished"] = ttl_seconds
    if timeout_seconds is not None:
        spec["activeDeadlineSeconds"] = max(1, int(round(timeout_seconds)))
    pod = spec.setdefault("template", {})
    pod.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    pod_spec = pod.setdefault("spec", {})
    pod_spec["restartPolicy"] = "Never"
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise JobTemplateError("the template's pod has no containers")
    for container in containers:
        given = [e for e in container.get("env") or [] if e.get("name") not in env]
        container["env"] = given + [{"name": k, "value": v} for k, v in env.items()]
        if memory_bytes is not None:
            container.setdefault("resources", {}).setdefault("limits", {})["memory"] = str(memory_bytes)
    if argv:
        containers[0]["command"] = list(argv)
        containers[0].pop("args", None)
    return job


def _label_value(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63].strip("-_.") or "none"


@dataclass(frozen=True)
class KubernetesOptions:
    """Where and how the controller makes its Jobs."""

    template: dict[str, Any]
    namespace: str = "default"
    ttl_seconds: int = 3600  #: the cluster deletes a finished Job (and its pods) this long after it ended
    poll_seconds: float = 1.0  #: how often a running Job's status is read
    api_url: Optional[str] = None  #: the API server; None: in-cluster config, else the kubeconfig
    api_token: Optional[str] = None  #: a bearer token for ``api_url``


class JobLauncher:
    """Runs attempts as Jobs; ``run`` is the Kubernetes counterpart of :func:`~.launch.run_command`."""

    def __init__(self, options: KubernetesOptions) -> None:
        self.options = options
        self._api: Any = None
        self._lock = asyncio.Lock()

    async def _client(self) -> Any:
        from kubernetes_asyncio import client, config

        async with self._lock:
            if self._api is None:
                if self.options.api_url is not None:
                    configuration = client.Configuration(host=self.options.api_url)
                    if self.options.api_token:
                        configuration.api_key = {"BearerToken": self.options.api_token}
                        configuration.api_key_prefix = {"BearerToken": "Bearer"}
                    self._api = client.ApiClient(configuration)
                else:
                    try:
                        config.load_incluster_config()
                    except config.ConfigException:
                        await config.load_kube_config()
                    self._api = client.ApiClient()
            return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def run(self, *, rollout_id: str, attempt_id: str, env: Mapping[str, str], log_path: Path,
                  timeout_seconds: Optional[float], argv: Optional[list[str]], memory_bytes: Optional[int],
                  log_cap_bytes: int) -> ProcessResult:  # fmt: skip
        from kubernetes_asyncio import client

        api = await self._client()
        jobs, core = client.BatchV1Api(api), client.CoreV1Api(api)
        name = job_name(attempt_id)
        body = build_job(self.options.template, name=name, rollout_id=rollout_id, attempt_id=attempt_id, env=env,
                         timeout_seconds=timeout_seconds, ttl_seconds=self.options.ttl_seconds, argv=argv,
                         memory_bytes=memory_bytes)  # fmt: skip
        namespace = self.options.namespace
        started = time.monotonic()
        await jobs.create_namespaced_job(namespace, body)
        logger.info("attempt %s of rollout %s: Job %s/%s created", attempt_id, rollout_id, namespace, name)
        ended = False
        try:
            while True:
                job = await jobs.read_namespaced_job_status(name, namespace)
                end = _job_end(job)
                if end is not None:
                    ended = True
                    break
                await asyncio.sleep(self.options.poll_seconds)
        finally:
            if not ended:  # cancelled, or the API failed: the Job must not run on without an attempt
                await asyncio.shield(self._delete(jobs, name, namespace))
        kind, reason = end
        pod = await _job_pod(core, name, namespace)
        returncode, pod_reason = _exit_of(pod)
        log_bytes, dropped = await _save_log(core, pod, namespace, log_path, log_cap_bytes)
        timed_out = reason == DEADLINE_EXCEEDED
        ended_by: Optional[str] = None
        if kind == "Complete":
            returncode = 0
        elif timed_out:
            ended_by = DEADLINE_EXCEEDED
            returncode = 1 if returncode is None or returncode == 0 else returncode
        elif pod_reason is not None:  # the kubelet's word for it (OOMKilled, ...)
            ended_by = pod_reason
        elif returncode is None or returncode == 0:  # failed without an exit status (never scheduled, no image, ...)
            returncode, ended_by = 1, reason or "Failed"
        return ProcessResult(returncode=returncode, timed_out=timed_out, duration_seconds=time.monotonic() - started,
                             cpu_seconds=None, log_path=log_path, log_bytes=log_bytes, log_dropped_bytes=dropped,
                             leftovers_killed=0, ended_by=ended_by)  # fmt: skip

    async def _delete(self, jobs: Any, name: str, namespace: str) -> None:
        try:
            await jobs.delete_namespaced_job(name, namespace, propagation_policy="Background")
            logger.info("Job %s/%s deleted (its attempt ended before it did)", namespace, name)
        except Exception as exc:  # the TTL and the deadline still bound it; say so
            logger.error("could not delete Job %s/%s (its deadline and TTL still bound it): %r", namespace, name, exc)


def _job_end(job: Any) -> Optional[tuple[str, Optional[str]]]:
    """("Complete" | "Failed", reason) once the Job has ended, else None."""
    for condition in (job.status.conditions or []) if job.status else []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.type, condition.reason
    return None


async def _job_pod(core: Any, name: str, namespace: str) -> Optional[Any]:
    """The Job's pod (the last one made: backoffLimit 0 makes one)."""
    pods = await core.list_namespaced_pod(namespace, label_selector=f"job-name={name}")
    items = sorted(pods.items or [], key=lambda p: p.metadata.creation_timestamp or 0)
    return items[-1] if items else None


def _exit_of(pod: Optional[Any]) -> tuple[Optional[int], Optional[str]]:
    """The first container's exit status and the reason Kubernetes gives (``OOMKilled``, ``Error``)."""
    statuses = (pod.status.container_statuses or []) if pod is not None and pod.status else []
    for status in statuses:
        terminated = status.state.terminated if status.state else None
        if terminated is not None:
            reason = terminated.reason if terminated.reason not in (None, "Completed", "Error") else None
            return terminated.exit_code, reason
    return None, None


async def _save_log(core: Any, pod: Optional[Any], namespace: str, path: Path, cap: int) -> tuple[int, int]:
    """The pod's log into ``path``, its first and last halves of ``cap`` bytes; (bytes read, bytes dropped)."""
    data = b""
    if pod is not None:
        try:
            # raw: the client would parse a log that happens to be JSON and hand back its repr
            response = await core.read_namespaced_pod_log(pod.metadata.name, namespace, _preload_content=False)
            try:
                data = await response.read()
            finally:
                response.release()
        except Exception as exc:  # the attempt's outcome does not depend on its log; say why it is missing
            data = f"[agl-stream controller: the pod's log could not be read: {exc!r}]\n".encode()
    kept = data if len(data) <= cap else data[: cap // 2] + data[-(cap - cap // 2):]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(kept)
    return len(data), len(data) - len(kept)
