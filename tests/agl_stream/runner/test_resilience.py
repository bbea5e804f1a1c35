"""Failure cases with real parts: a runner process killed mid-rollout, a broker that crashes and is restarted."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from agl_stream.broker import KafkaBroker, choose_local_broker
from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.runner import LitAgentRunner
from agl_stream.types import AttemptEvent, Span
from tests.agl_stream.runner import agents
from tests.agl_stream.runner.helpers import collect, run_with_timeout

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _succeeded(events: list[AttemptEvent]) -> set[str]:
    return {e.rollout_id for e in events if e.kind == "finished" and e.status == "succeeded"}


def _runner_process(settings: Settings, log: Path, *, sleep: float, concurrency: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "AGL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
        "AGL_TOPIC_PREFIX": settings.topic_prefix,
        "AGL_PARTITIONS": str(settings.partitions),
        "AGL_KAFKA_SESSION_TIMEOUT_MS": str(settings.kafka_session_timeout_ms),
        "AGL_TEST_AGENT_SLEEP": str(sleep),
    }
    cmd = [sys.executable, "-m", "agl_stream.cli.main", "runner", "--agent", "tests.agl_stream.runner.agents:slow_agent",
           "--concurrency", str(concurrency), "--heartbeat-interval", "0.5", "--no-progress"]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


async def test_killed_runner_leaves_unclaimed_tasks_to_the_group_and_never_reruns_a_claimed_attempt(
    topics: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A claimed attempt (``started`` and commit acknowledged) belongs to the state machine, which retries
    it as a new attempt (see tests/faults); every task the dead runner had not claimed goes to another runner."""
    async with StoreClient(topics) as store:
        ids = [(await store.enqueue_rollout({"x": i})).rollout_id for i in range(6)]
    victim = _runner_process(topics, tmp_path / "victim.log", sleep=1.0, concurrency=2)
    try:
        def mid_rollout(events: list[AttemptEvent]) -> bool:
            started = {e.rollout_id for e in events if e.kind == "started"}
            finished = {e.rollout_id for e in events if e.kind == "finished"}
            return bool(finished) and bool(started - finished)

        seen = await collect(topics, "attempts", AttemptEvent, mid_rollout, timeout=60)
        assert mid_rollout(seen), "the runner process never got going: " + (tmp_path / "victim.log").read_text()[-2000:]
        await asyncio.sleep(0.5)  # mid-rollout (each takes 1 s), past the claim of the attempts just started
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
    seen = await collect(topics, "attempts", AttemptEvent, lambda ev: False, timeout=3)  # all the victim wrote
    claimed = {e.attempt_id for e in seen if e.kind == "started"}
    interrupted = {e.rollout_id for e in seen if e.kind == "started"} - {e.rollout_id for e in seen if e.kind == "finished"}
    assert interrupted, "the kill interrupted no attempt"

    monkeypatch.setenv("AGL_TEST_AGENT_SLEEP", "0.05")
    stop = asyncio.Event()
    rescuer = LitAgentRunner(agents.slow_agent, topics, concurrency=2, worker_id="rescuer")
    run = asyncio.create_task(rescuer.run(stop))
    unclaimed = set(ids) - {e.rollout_id for e in seen if e.kind == "started"}
    try:
        events = await collect(topics, "attempts", AttemptEvent, lambda ev: _succeeded(ev) >= unclaimed, timeout=90)
        await asyncio.sleep(2.0)  # time for a wrong rerun of a claimed attempt to show up
    finally:
        stop.set()
        await run_with_timeout(run)
    events = await collect(topics, "attempts", AttemptEvent, lambda ev: False, timeout=3)  # everything
    assert _succeeded(events) >= unclaimed, "every task the victim had not claimed was completed by the rescuer"
    rerun = {e.attempt_id for e in events if e.worker_id == "rescuer"} & claimed
    assert not rerun, f"the rescuer ran attempts the victim had claimed: {rerun}"
    assert rescuer.stats.rollouts_started == len(unclaimed)


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A broker of this test's own, which it crashes and restarts (same port, same data on disk)."""
    if choose_local_broker(Settings.from_env()) != "kafka":
        pytest.skip("a broker restart needs Apache Kafka: Tansu's memory engine loses every record when it stops")
    broker = KafkaBroker(data_dir=tmp_path / "kafka", log_file=tmp_path / "broker.log")
    with broker:
        yield broker


async def test_runner_survives_broker_outage_without_losing_spans(
    private_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker is SIGKILLed mid-run and started again 3 s later: every rollout finishes and no span is lost."""
    settings = Settings.from_env(env={}, kafka_bootstrap=private_broker.bootstrap, topic_prefix="outage", partitions=2,
                                 kafka_session_timeout_ms=10_000, data_dir=tmp_path / "agl")  # fmt: skip
    from agl_stream_topics.admin import ensure_topics

    await ensure_topics(settings, strict=True)
    async with StoreClient(settings) as store:
        ids = [(await store.enqueue_rollout({"x": i})).rollout_id for i in range(16)]
    monkeypatch.setenv("AGL_TEST_AGENT_SLEEP", "0.2")
    stop = asyncio.Event()
    runner = LitAgentRunner(agents.slow_agent, settings, concurrency=2, heartbeat_interval=0.3)
    run = asyncio.create_task(runner.run(stop))
    try:
        while runner.stats.rollouts_done < 3:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(private_broker.kill)
        await asyncio.sleep(3.0)
        done_before_restart = runner.stats.rollouts_done
        await asyncio.to_thread(private_broker.start)
        events = await collect(settings, "attempts", AttemptEvent, lambda ev: _succeeded(ev) >= set(ids), timeout=120)
    finally:
        stop.set()
        await run_with_timeout(run, 120)
    assert _succeeded(events) >= set(ids)
    assert done_before_restart < len(ids), "the outage happened while rollouts were still running"
    finished = {e.attempt_id: e for e in events if e.kind == "finished" and e.status == "succeeded"}
    expected = {(attempt, seq) for attempt, e in finished.items() for seq in range(1, (e.span_count or 0) + 1)}
    spans = await collect(settings, "spans", Span, lambda s: {(x.attempt_id, x.sequence_id) for x in s} >= expected)
    assert {(s.attempt_id, s.sequence_id) for s in spans} >= expected, "no span lost across the outage"
    assert runner.stats.spans_dropped == 0


async def test_cli_sigterm_finishes_the_running_attempt(topics: Settings, tmp_path: Path) -> None:
    (rid,) = [(await _enqueue_one(topics, {"x": 1}))]
    proc = _runner_process(topics, tmp_path / "runner.log", sleep=1.5, concurrency=1)
    try:
        await collect(topics, "attempts", AttemptEvent, lambda ev: any(e.kind == "started" for e in ev), timeout=60)
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, (tmp_path / "runner.log").read_text()[-3000:]
    events = await collect(topics, "attempts", AttemptEvent, lambda ev: any(e.kind == "finished" for e in ev))
    (finished,) = [e for e in events if e.kind == "finished"]
    assert finished.rollout_id == rid and finished.status == "succeeded" and finished.span_count == 2


async def test_cli_starts_several_runner_processes(topics: Settings, tmp_path: Path) -> None:
    for i in range(10):
        await _enqueue_one(topics, {"x": i})
    env = {**os.environ, "AGL_KAFKA_BOOTSTRAP": topics.kafka_bootstrap or "", "AGL_TOPIC_PREFIX": topics.topic_prefix,
           "AGL_KAFKA_SESSION_TIMEOUT_MS": "6000", "AGL_TEST_AGENT_SLEEP": "0.01"}  # fmt: skip
    cmd = [sys.executable, "-m", "agl_stream.cli.main", "runner", "--agent", "tests.agl_stream.runner.agents:slow_agent",
           "--n-runners", "2", "--max-rollouts", "1", "--worker-id", "multi", "--no-progress"]  # fmt: skip
    result = await asyncio.to_thread(subprocess.run, cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    events = await collect(topics, "attempts", AttemptEvent, lambda ev: sum(e.kind == "finished" for e in ev) >= 2)
    assert {e.worker_id for e in events if e.kind == "finished"} == {"multi-0", "multi-1"}


async def _enqueue_one(settings: Settings, task: object) -> str:
    async with StoreClient(settings) as store:
        return (await store.enqueue_rollout(task)).rollout_id
