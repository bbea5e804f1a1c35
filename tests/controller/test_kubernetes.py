"""Kubernetes mode: the attempt's Job against the Kubernetes API's schema, and followed on a fake API server.

No cluster exists here: the fake (``fake_kube.py``) validates each Job it is given against the schema
and runs its container command as a local process, so outcomes, logs, deadlines and deletions are real.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import kubernetes_validate
import pytest

from agl_stream import Settings
from agl_stream.runner import LitAgentRunner
from agl_stream.types import AttemptEvent
from agl_stream_controller import CommandSpec
from agl_stream_controller.agent import CommandAgent
from agl_stream_controller.kubernetes import (
    ATTEMPT_LABEL,
    JobLauncher,
    JobTemplateError,
    KubernetesOptions,
    build_job,
    job_name,
)
from agl_stream_controller.outcome import failure_reason
from agl_stream_controller.spec import Limits
from tests.agl_stream.runner.helpers import collect, run_with_timeout
from tests.agl_stream.runner.test_runner import _enqueue, _finished
from tests.controller.fake_kube import K8S_VERSION, create_fake_kube
from tests.ingest.helpers import ServedApp

TOKEN = "fake-kube-token"
TEMPLATE: dict[str, Any] = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"generateName": "agent-", "labels": {"team": "rl"}},
    "spec": {"backoffLimit": 6, "template": {"spec": {
        "containers": [{"name": "agent", "image": "registry.example/agent:1.0",
                        "env": [{"name": "MODEL", "value": "tiny"}, {"name": "OPENAI_BASE_URL", "value": "stale"}],
                        "resources": {"requests": {"cpu": "250m"}}}],
        "restartPolicy": "OnFailure"}}},
}  # fmt: skip


def test_the_attempts_job_is_valid_and_carries_its_variables_bounds_and_labels() -> None:
    job = build_job(TEMPLATE, name=job_name("at-00C0FFEE"), rollout_id="ro-000000000abc", attempt_id="at-00C0FFEE",
                    env={"OPENAI_BASE_URL": "http://proxy/rollout/ro-000000000abc/attempt/at-00C0FFEE/v1",
                         "AGL_TASK_JSON": '{"input": 1}'},
                    timeout_seconds=299.6, ttl_seconds=600, argv=["python", "agent.py"], memory_bytes=1 << 30)  # fmt: skip
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)  # the API's own schema, unknown fields refused
    assert job["metadata"]["name"] == "agl-at-00c0ffee" and "generateName" not in job["metadata"]
    assert job["metadata"]["labels"] == {"team": "rl", "agl-stream.io/rollout-id": "ro-000000000abc",
                                         ATTEMPT_LABEL: "at-00C0FFEE", "app.kubernetes.io/managed-by": "agl-stream-controller"}  # fmt: skip
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"], spec["activeDeadlineSeconds"]) == (0, 600, 300)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["command"] == ["python", "agent.py"] and container["resources"]["limits"]["memory"] == str(1 << 30)
    assert container["env"] == [{"name": "MODEL", "value": "tiny"},  # the template's own, less what the attempt sets
                                {"name": "OPENAI_BASE_URL", "value": "http://proxy/rollout/ro-000000000abc/attempt/at-00C0FFEE/v1"},
                                {"name": "AGL_TASK_JSON", "value": '{"input": 1}'}]  # fmt: skip
    assert TEMPLATE["spec"]["backoffLimit"] == 6  # the template itself is untouched


def test_a_template_that_is_not_a_job_is_refused() -> None:
    with pytest.raises(JobTemplateError, match="batch/v1 Job"):
        build_job({"apiVersion": "v1", "kind": "Pod"}, name="x", rollout_id="r", attempt_id="a", env={},
                  timeout_seconds=None, ttl_seconds=1)  # fmt: skip
    with pytest.raises(JobTemplateError, match="no containers"):
        build_job({"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {}}}}, name="x",
                  rollout_id="r", attempt_id="a", env={}, timeout_seconds=None, ttl_seconds=1)  # fmt: skip


@pytest.fixture
def kube() -> Iterator[ServedApp]:
    with ServedApp(create_fake_kube(TOKEN)) as served:
        yield served


def _launcher(kube: ServedApp) -> JobLauncher:
    return JobLauncher(KubernetesOptions(template=TEMPLATE, namespace="agents", ttl_seconds=900, poll_seconds=0.1,
                                         api_url=kube.url, api_token=TOKEN))  # fmt: skip


async def _run(launcher: JobLauncher, tmp_path: Path, code: str, *, attempt: str, timeout: float | None = None,
               env: dict[str, str] | None = None) -> Any:  # fmt: skip
    return await launcher.run(rollout_id="ro-kube", attempt_id=attempt, env=env or {}, log_path=tmp_path / attempt / "output.log",
                              timeout_seconds=timeout, argv=[sys.executable, "-c", code], memory_bytes=None,
                              log_cap_bytes=4096)  # fmt: skip


async def test_jobs_outcomes_are_mapped_and_their_logs_kept(kube: ServedApp, tmp_path: Path) -> None:
    launcher = _launcher(kube)
    try:
        ok = await _run(launcher, tmp_path, "import os; print('answer', os.environ['X'])", attempt="at-ok", env={"X": "4"})
        assert ok.returncode == 0 and failure_reason(ok, Limits()) is None
        assert ok.log_path.read_text() == "answer 4\n"
        failed = await _run(launcher, tmp_path, "import sys; print('no'); sys.exit(3)", attempt="at-exit3")
        assert failure_reason(failed, Limits()) == "exit code 3" and failed.log_path.read_text() == "no\n"
        oom = await _run(launcher, tmp_path, "import sys; sys.exit(137)", attempt="at-oom", env={"AGL_FAKE_OOM": "1"})
        assert failure_reason(oom, Limits()) == "OOMKilled (exit code 137)"
        slow = await _run(launcher, tmp_path, "import time; print('thinking', flush=True); time.sleep(60)",
                          attempt="at-slow", timeout=1)  # fmt: skip
        assert slow.timed_out and slow.duration_seconds < 30
        assert failure_reason(slow, Limits(timeout_seconds=1)) == ("timeout: still running after 1 s; its Job was "
                                                                   "stopped (DeadlineExceeded)")  # fmt: skip
        loud = await _run(launcher, tmp_path, "print('x' * 10000)", attempt="at-loud")
        assert loud.log_bytes == 10001 and loud.log_dropped_bytes == 10001 - 4096
    finally:
        await launcher.close()
    created = kube.server.config.app.state.created
    assert [job["metadata"]["name"] for job in created] == ["agl-at-ok", "agl-at-exit3", "agl-at-oom", "agl-at-slow", "agl-at-loud"]
    assert all(job["spec"]["ttlSecondsAfterFinished"] == 900 and job["spec"]["backoffLimit"] == 0 for job in created)
    assert kube.server.config.app.state.refused == [] and kube.server.config.app.state.deleted == []


async def test_a_cancelled_attempts_job_is_deleted_with_its_pods(kube: ServedApp, tmp_path: Path) -> None:
    launcher = _launcher(kube)
    marker = tmp_path / "still-running"
    code = f"import time, pathlib\nwhile True:\n    pathlib.Path({str(marker)!r}).touch(); time.sleep(0.1)"
    try:
        running = asyncio.create_task(_run(launcher, tmp_path, code, attempt="at-cancelled"))
        for _ in range(300):
            if marker.exists():
                break
            await asyncio.sleep(0.05)
        assert marker.exists()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        await launcher.close()
    assert kube.server.config.app.state.deleted == [("agl-at-cancelled", "Background")]
    assert kube.server.config.app.state.jobs == {}
    marker.unlink()
    await asyncio.sleep(0.5)
    assert not marker.exists()  # the pod's process is gone too


AGENT = textwrap.dedent("""
    import json, os, sys
    task = json.loads(os.environ["AGL_TASK_JSON"])
    print(json.dumps({k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "QUESTION",
                                                      "AGL_REWARD_FILE", "AGL_TASK_FILE", "HOME")}))
    sys.exit(0 if task["input"]["answer"] == 4 else 5)
""")


@pytest.mark.integration
async def test_the_controller_runs_each_attempt_as_a_job(topics: Settings, kube: ServedApp, tmp_path: Path) -> None:
    ids = await _enqueue(topics, [{"question": "2+2?", "answer": 4}, {"question": "?", "answer": 5}], mode="train")
    spec = CommandSpec.model_validate({"argv": [sys.executable, "-c", AGENT], "limits": {"timeout_seconds": 60},
                                       "input": {"env_map": {"QUESTION": "input.question"}}})  # fmt: skip
    launcher = _launcher(kube)
    agent = CommandAgent(spec, proxy_url="http://proxy.test:4000", logs_dir=tmp_path / "logs", jobs=launcher)
    try:
        stats = await run_with_timeout(LitAgentRunner(agent, topics, max_rollouts=2, heartbeat_interval=0.2).run())
    finally:
        await launcher.close()
    assert (stats.rollouts_succeeded, stats.rollouts_failed) == (1, 1)  # type: ignore[attr-defined]
    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 2))
    good, bad = finished[ids[0]], finished[ids[1]]
    assert good.status == "succeeded" and bad.status == "failed"
    assert (bad.error or "").startswith("CommandFailed: exit code 5 (output: ")
    seen = json.loads((tmp_path / "logs" / ids[0] / good.attempt_id / "output.log").read_text().splitlines()[0])
    scoped = f"http://proxy.test:4000/rollout/{ids[0]}/attempt/{good.attempt_id}/v1"
    # only the attempt's variables reach the pod: no path on the controller's disk, none of its own environment
    assert seen == {"OPENAI_BASE_URL": scoped, "ANTHROPIC_BASE_URL": scoped.removesuffix("/v1"), "QUESTION": "2+2?",
                    "AGL_REWARD_FILE": None, "AGL_TASK_FILE": None, "HOME": None}  # fmt: skip
    created = {job["metadata"]["labels"][ATTEMPT_LABEL]: job for job in kube.server.config.app.state.created}
    assert set(created) == {good.attempt_id, bad.attempt_id}
    assert created[good.attempt_id]["spec"]["activeDeadlineSeconds"] == 60


def test_the_cli_refuses_a_template_that_cannot_make_jobs_at_start(tmp_path: Path) -> None:
    import subprocess

    def controller(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agl_stream.cli.main", "controller", *args, "--bootstrap",
                               "127.0.0.1:1", "--", "agent"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "300"})  # fmt: skip (one line per message)

    template = tmp_path / "job.yaml"
    template.write_text("apiVersion: v1\nkind: Pod\n")
    refused = controller("--job-template", str(template))
    assert refused.returncode == 2 and "must be a batch/v1 Job" in refused.stderr
    template.write_text(json.dumps(TEMPLATE))
    refused = controller("--job-template", str(template), "--stdin")
    assert refused.returncode == 2 and "AGL_TASK_JSON" in refused.stderr
