"""The ``agl-stream processors`` service: app lifecycle, health, crash handling, and a real end-to-end run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.serialization import decode
from agl_stream.types import Attempt, AttemptedRollout, AttemptEvent, RolloutSnapshot, Trajectory
from agl_stream_processors.service import ProcessorService, resolve

from tests.agl_stream.adapter.spans import SpanBuilder


class FakeApp:
    """Pure stand-in for an app: runs until stopped, or fails when told to."""

    def __init__(self, name: str, fail_after: float | None = None) -> None:
        self.name = name
        self.fail_after = fail_after
        self.stopped_cleanly = False
        self.ticks = 0

    async def run(self, stop: asyncio.Event) -> None:
        started = time.monotonic()
        while not stop.is_set():
            self.ticks += 1
            if self.fail_after is not None and time.monotonic() - started >= self.fail_after:
                raise RuntimeError(f"{self.name} broke")
            await asyncio.sleep(0.01)
        self.stopped_cleanly = True

    def health(self) -> Mapping[str, Any]:
        return {"ticks": self.ticks}


async def test_apps_run_report_health_and_stop_together(settings: Settings, tmp_path: Path) -> None:
    a, b = FakeApp("a"), FakeApp("b")
    reports: list[dict[str, Any]] = []
    health_file = tmp_path / "health.json"
    service = ProcessorService(settings, apps=[a, b], health_interval=0.05, health_file=health_file, on_health=reports.append)
    stop = asyncio.Event()
    run = asyncio.create_task(service.run(stop))
    while len(reports) < 3:
        await asyncio.sleep(0.01)
    stop.set()
    assert await run == 0
    assert a.stopped_cleanly and b.stopped_cleanly
    assert set(reports[-1]["apps"]) == {"a", "b"} and reports[-1]["apps"]["a"]["status"] == "running"
    assert json.loads(health_file.read_text())["apps"]["b"]["ticks"] == b.ticks


async def test_a_crashing_app_stops_the_service_with_an_error(settings: Settings) -> None:
    good, bad = FakeApp("good"), FakeApp("bad", fail_after=0.05)
    service = ProcessorService(settings, apps=[good, bad], health_interval=60)
    assert await asyncio.wait_for(service.run(asyncio.Event()), 10) == 1
    assert good.stopped_cleanly
    report = service.health()["apps"]
    assert report["bad"]["status"] == "failed" and "bad broke" in report["bad"]["error"]


def test_app_names_resolve_against_the_registry() -> None:
    assert resolve(None) == ["state-machine", "triplets", "sinks"]
    assert resolve(["triplets", "triplets"]) == ["triplets"]
    with pytest.raises(ValueError, match="unknown processor app"):
        resolve(["nope"])


@pytest.mark.integration
async def test_state_machine_and_triplets_end_to_end(topics: Settings) -> None:
    """One attempt through both apps of the service: a succeeded snapshot and its trajectory."""
    rid, aid = "ro-0000000000e1", "at-000000e1"
    b = SpanBuilder(rollout_id=rid, attempt_id=aid)
    agent = b.agent("solver", 0.0, 5.0)
    b.llm(1.0, 2.0, agent, prompt=[1, 2], response=[3], response_id="c1")
    b.reward(1.0, 3.0, agent)
    service = ProcessorService(topics, ["state-machine", "triplets"], options={"grace_seconds": 5.0}, health_interval=0.5)
    stop = asyncio.Event()
    run = asyncio.create_task(service.run(stop))
    task = AttemptedRollout(rollout_id=rid, input={}, metadata={"group_id": "g1"},
                            attempt=Attempt(rollout_id=rid, attempt_id=aid))  # fmt: skip
    common = dict(rollout_id=rid, attempt_id=aid, metadata={"group_id": "g1"})
    async with RecordProducer(topics) as producer:
        await producer.send_and_wait(topics.topic("tasks"), task, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), AttemptEvent(kind="started", **common), key=rid)  # type: ignore[arg-type]
        for span in b.spans:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        finished = AttemptEvent(kind="finished", status="succeeded", span_count=len(b.spans), **common)  # type: ignore[arg-type]
        await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
    snapshot, trajectory = None, None
    async with RecordConsumer(topics, [topics.topic("rollouts"), topics.topic("triplets")], None) as consumer:
        deadline = time.monotonic() + 60
        while (trajectory is None or snapshot is None or snapshot.rollout.status != "succeeded") and time.monotonic() < deadline:
            assert not run.done(), run
            for record in await consumer.getmany(timeout=0.2):
                if record.topic == topics.topic("triplets"):
                    trajectory = decode(record.value, Trajectory)
                else:
                    snapshot = decode(record.value, RolloutSnapshot)
    stop.set()
    assert await asyncio.wait_for(run, 60) == 0
    assert snapshot is not None and snapshot.rollout.status == "succeeded"
    assert trajectory is not None and trajectory.group_id == "g1"
    assert [(t.prompt_token_ids, t.response_token_ids, t.reward) for t in trajectory.triplets] == [([1, 2], [3], 1.0)]
    apps = service.health()["apps"]
    assert apps["triplets"]["trajectories"] == 1 and apps["state-machine"]["snapshots"] >= 1


@pytest.mark.integration
def test_cli_runs_until_sigterm_and_exits_cleanly(settings: Settings, tmp_path: Path) -> None:
    health = tmp_path / "health.json"
    env = {
        **os.environ,
        "AGL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
        "AGL_TOPIC_PREFIX": settings.topic_prefix,
        "AGL_PARTITIONS": str(settings.partitions),
        "AGL_KAFKA_SESSION_TIMEOUT_MS": "6000",
    }
    cmd = [sys.executable, "-m", "agl_stream.cli.main", "processors", "triplets",
           "--health-interval", "0.2", "--health-file", str(health)]  # fmt: skip
    from agl_stream_topics.admin import ensure_topics

    asyncio.run(ensure_topics(settings))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if health.exists() and json.loads(health.read_text())["apps"]["triplets"].get("ready"):
                break
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]  # type: ignore[union-attr]
            time.sleep(0.1)
        else:
            raise AssertionError("the service never reported ready")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _service_env(settings: Settings, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AGL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
        "AGL_TOPIC_PREFIX": settings.topic_prefix,
        "AGL_PARTITIONS": str(settings.partitions),
        "AGL_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "AGL_DATA_DIR": str(tmp_path / "agl"),
    }


def _ready(app: dict) -> bool:
    """An app's own ``ready``, or (the sinks) every sink's."""
    if "ready" in app:
        return bool(app["ready"])
    sinks = [v for v in app.values() if isinstance(v, dict)]
    return bool(sinks) and all(v.get("ready") for v in sinks)


def _wait_all_ready(proc: "subprocess.Popen[bytes]", health: Path, apps: set[str], log: Path, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            report = json.loads(health.read_text())
        except (OSError, ValueError):
            report = {}
        if set(report.get("apps", {})) == apps and all(_ready(a) for a in report["apps"].values()):
            return report
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"the apps never all reported ready: {health.read_text() if health.exists() else '(no report)'}\n"
                         f"{log.read_text(errors='replace')[-4000:]}")  # fmt: skip


@pytest.mark.integration
def test_every_app_runs_in_its_own_process_and_a_dead_one_stops_the_service(settings: Settings, tmp_path: Path) -> None:
    """The default: one process per app, one merged health report; an app crashing takes the service down
    (exit 1) so a supervisor restarts everything, and SIGTERM stops every app cleanly (exit 0)."""
    from agl_stream_topics.admin import ensure_topics

    asyncio.run(ensure_topics(settings))
    apps = {"state-machine", "triplets", "sinks"}
    for crash in (False, True):
        health = tmp_path / f"health-{crash}.json"
        cmd = [sys.executable, "-m", "agl_stream.cli.main", "processors", "--health-interval", "0.5",
               "--health-file", str(health)]  # fmt: skip
        log = tmp_path / f"service-{crash}.log"  # a file: a pipe nobody reads would fill up and block the service
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=_service_env(settings, tmp_path), stdout=out, stderr=subprocess.STDOUT)
        try:
            report = _wait_all_ready(proc, health, apps, log)
            pids = {name: info["pid"] for name, info in report["processes"].items()}
            assert len(set(pids.values())) == 3 and proc.pid not in pids.values()
            if crash:
                os.kill(pids["triplets"], signal.SIGKILL)
                assert proc.wait(timeout=90) == 1
                final = json.loads(health.read_text())
                assert final["apps"]["triplets"]["status"] == "failed"
                for pid in pids.values():  # the others were stopped, not left running
                    with pytest.raises(ProcessLookupError):
                        os.kill(pid, 0)
            else:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=90) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.integration
def test_a_killed_supervisor_takes_its_apps_with_it(settings: Settings, tmp_path: Path) -> None:
    """SIGKILL gives the supervisor no chance to stop its apps: the kernel's parent-death signal does
    (each app gets SIGTERM and shuts down), so no app goes on consuming as an orphan."""
    from agl_stream_topics.admin import ensure_topics

    asyncio.run(ensure_topics(settings))
    health, log = tmp_path / "health.json", tmp_path / "service.log"
    cmd = [sys.executable, "-m", "agl_stream.cli.main", "processors", "--health-interval", "0.5", "--health-file", str(health)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=_service_env(settings, tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        report = _wait_all_ready(proc, health, {"state-machine", "triplets", "sinks"}, log)
        pids = [info["pid"] for info in report["processes"].values()]
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60
        alive = list(pids)
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if _running(pid)]
            time.sleep(0.2)
        assert not alive, f"apps left running after the supervisor was killed: {alive}\n{log.read_text(errors='replace')[-3000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
