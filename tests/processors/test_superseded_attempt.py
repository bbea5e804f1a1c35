"""One rollout, one training signal: the superseded-attempt race, reproduced without relying on timing.

Runner A takes attempt 1, sends a span, then goes silent (a GC pause, a lost broker link). The real
state machine declares the attempt ``unresponsive`` and requeues the rollout as attempt 2; runner B
runs attempt 2 to success. Runner A then comes back and delivers attempt 1's remaining spans and its
``finished``: after attempt 2's ``finished`` (``late``) or before attempt 2 even started (``early``).
Each step waits for the state machine's snapshot that makes the next one meaningful, so the
interleaving is the same on every run whatever the machine's speed.

The whole processors service runs in this process (state machine, triplet processor, ClickHouse
sinks on the embedded engine) against the real broker, and the learner's own batcher reads
``agl.triplets``. Expected: both attempts' trajectories are stored, attempt 1's marked
``superseded``; the learner trains exactly one trajectory (attempt 2's); the rollout row names
attempt 2 as ``succeeded``; the reward saved query counts the rollout once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.serialization import decode
from agl_stream.types import Attempt, AttemptedRollout, AttemptEvent, RolloutConfig, RolloutSnapshot, Span, Trajectory
from agl_stream_processors.service import ProcessorService
from tests.agl_stream.adapter.spans import SpanBuilder

pytestmark = pytest.mark.integration

RETRY_SILENT = RolloutConfig(unresponsive_seconds=1.0, max_attempts=2, retry_condition=["unresponsive"])
META = {"group_id": "g-race", "group_size": 1}


def attempt_spans(rollout_id: str, attempt_id: str, reward: float) -> list[Span]:
    b = SpanBuilder(rollout_id=rollout_id, attempt_id=attempt_id)
    agent = b.agent("solver", 0.0, 5.0)
    b.llm(1.0, 2.0, agent, prompt=[1, 2], response=[3, 4], response_id=f"c-{attempt_id}")
    b.reward(reward, 3.0, agent)
    return b.spans


class Runner:
    """What a runner writes for one attempt, record by record (the runner's own record shapes)."""

    def __init__(self, settings: Settings, producer: RecordProducer, attempt_id: str, sequence_id: int, reward: float,
                 rollout_id: str, worker: str) -> None:  # fmt: skip
        self.settings, self.producer = settings, producer
        self.spans = attempt_spans(rollout_id, attempt_id, reward)
        self.common: dict[str, Any] = dict(rollout_id=rollout_id, attempt_id=attempt_id, attempt_sequence_id=sequence_id,
                                           worker_id=worker, mode="train", metadata=META)  # fmt: skip

    async def started(self) -> None:
        await self._send("attempts", AttemptEvent(kind="started", **self.common))

    async def span(self, index: int) -> None:
        await self._send("spans", self.spans[index])

    async def finish(self) -> None:
        for index in range(1, len(self.spans)):
            await self.span(index)
        finished = AttemptEvent(kind="finished", status="succeeded", span_count=len(self.spans), **self.common)
        await self._send("attempts", finished)

    async def _send(self, short: str, value: Any) -> None:
        await self.producer.send_and_wait(self.settings.topic(short), value, key=self.common["rollout_id"])


class Watcher:
    """Follows agl.rollouts and agl.triplets; waits on conditions with the service's health in the message."""

    def __init__(self, settings: Settings, service: ProcessorService, run: "asyncio.Task[int]") -> None:
        self.settings, self.service, self.run = settings, service, run
        self.snapshots: list[RolloutSnapshot] = []
        self.trajectories: list[Trajectory] = []

    async def until(self, what: str, predicate: Any, consumer: RecordConsumer, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert not self.run.done(), f"the processors service stopped: {self.run}"
            if time.monotonic() > deadline:
                seen = [(s.rollout.status, s.attempt.attempt_id if s.attempt else None, s.attempts) for s in self.snapshots]
                raise AssertionError(f"timed out waiting for {what}; snapshots {seen}; health {self.service.health()}")
            for record in await consumer.getmany(timeout=0.2):
                if record.topic == self.settings.topic("triplets"):
                    self.trajectories.append(decode(record.value, Trajectory))
                else:
                    self.snapshots.append(decode(record.value, RolloutSnapshot))

    def latest(self) -> Optional[RolloutSnapshot]:
        return self.snapshots[-1] if self.snapshots else None

    def status_is(self, status: str, attempts: int) -> bool:
        s = self.latest()
        return s is not None and s.rollout.status == status and s.attempts == attempts


async def learner_batches(settings: Settings, expected_trajectories: int) -> tuple[list[Trajectory], Any]:
    """The learner's own batcher on agl.triplets: every trajectory it trains, and its stats."""
    from agl_stream_trainer.batching import LEARNER_GROUP, BatcherConfig, TripletBatcher, wait_for_assignment

    config = BatcherConfig(group_size=1, batch_groups=1, min_group_size=1, max_staleness=None)
    trained: list[Trajectory] = []
    async with RecordConsumer(settings, [settings.topic("triplets")], f"{settings.topic_prefix}-{LEARNER_GROUP}") as consumer:
        await wait_for_assignment(consumer)
        batcher = TripletBatcher(consumer, config)
        deadline = time.monotonic() + 60
        while batcher.stats.trajectories < expected_trajectories and time.monotonic() < deadline:
            batch = await batcher.next_batch(0, timeout=0.5)
            if batch is not None:
                trained.extend(batch.trajectories)
                batcher.done(batch)
        batch = await batcher.next_batch(0, timeout=0.5, force=True)  # nothing may be left to train
        if batch is not None:
            trained.extend(batch.trajectories)
    return trained, batcher.stats


@pytest.mark.parametrize("late", ["late", "early"])
async def test_a_retried_attempt_reporting_late_is_never_trained(topics: Settings, tmp_path: Path, late: str) -> None:
    rid = "ro-00000000ace" + ("1" if late == "late" else "2")
    aid1 = "at-0000ace1"
    task = AttemptedRollout(rollout_id=rid, input={"q": 1}, config=RETRY_SILENT, metadata=META,
                            attempt=Attempt(rollout_id=rid, attempt_id=aid1))  # fmt: skip
    service = ProcessorService(topics, options={"grace_seconds": 5.0, "scan_interval": 0.1}, health_interval=0.5)
    stop = asyncio.Event()
    run = asyncio.create_task(service.run(stop))
    watch = Watcher(topics, service, run)
    try:
        async with RecordProducer(topics) as producer, \
                RecordConsumer(topics, [topics.topic("rollouts"), topics.topic("triplets")], None) as consumer:  # fmt: skip
            runner_a = Runner(topics, producer, aid1, 1, reward=0.25, rollout_id=rid, worker="Worker-A")
            await producer.send_and_wait(topics.topic("tasks"), task, key=rid)
            await runner_a.started()
            await runner_a.span(0)
            await watch.until("attempt 1 running", lambda: watch.status_is("running", 1), consumer)
            # runner A goes silent: the watchdog closes attempt 1 and requeues the rollout as attempt 2
            await watch.until("the requeue", lambda: watch.status_is("requeuing", 2), consumer)
            retry = watch.latest()
            assert retry is not None and retry.attempt is not None
            aid2 = retry.attempt.attempt_id
            runner_b = Runner(topics, producer, aid2, 2, reward=0.75, rollout_id=rid, worker="Worker-B")
            if late == "early":  # A comes back before attempt 2 is even taken
                await runner_a.finish()
            await runner_b.started()
            await runner_b.finish()
            await watch.until("attempt 2 succeeded", lambda: watch.status_is("succeeded", 2), consumer)
            if late == "late":  # A comes back after the rollout ended
                await runner_a.finish()
            await watch.until("both trajectories", lambda: len(watch.trajectories) == 2, consumer)
        trained, stats = await learner_batches(topics, expected_trajectories=2)
        health = service.health()["apps"]
    finally:
        stop.set()
        assert await asyncio.wait_for(run, 60) == 0

    # the triplet processor stamped the state machine's decision on both trajectories
    decisions = {t.attempt_id: (t.decision, t.rollout_status, t.trainable, t.final_reward) for t in watch.trajectories}
    assert decisions == {aid1: ("superseded", decisions[aid1][1], False, 0.25), aid2: ("final", "succeeded", True, 0.75)}
    # the learner trained one trajectory for the rollout: attempt 2's
    assert [(t.rollout_id, t.attempt_id) for t in trained] == [(rid, aid2)]
    assert stats.superseded == 1 and stats.trained_triplets == 1
    # the state machine ignored attempt 1's late events and kept a consistent rollout
    final = watch.latest()
    assert final is not None and final.attempt is not None
    assert (final.rollout.status, final.attempt.attempt_id, final.attempt.status) == ("succeeded", aid2, "succeeded")
    assert health["state-machine"].get("superseded_event", 0) >= 1
    assert health["triplets"]["trajectories_superseded"] == 1 and health["triplets"]["trajectories_final"] == 1

    from agl_stream_processors.analytics.saved import load_saved_queries
    from agl_stream_processors.clickhouse import connect

    ch = connect(str(topics.effective_clickhouse_dsn))
    try:
        row = ch.query_rows(f"SELECT Status, AttemptId, AttemptStatus FROM rollouts FINAL WHERE RolloutId = '{rid}'")[1]
        assert row == [("succeeded", aid2, "succeeded")]
        stored = ch.query_rows(f"SELECT AttemptId, any(Decision), any(RolloutStatus) FROM triplets FINAL "
                               f"WHERE RolloutId = '{rid}' GROUP BY AttemptId ORDER BY AttemptId")[1]  # fmt: skip
        assert {r[0]: r[1] for r in stored} == {aid1: "superseded", aid2: "final"}
        cols, rows = ch.query_rows(load_saved_queries()["reward_by_policy_version"].sql)
        by_col = [dict(zip(cols, r)) for r in rows]
        assert sum(r["trajectories"] for r in by_col) == 1 and by_col[0]["mean_final_reward"] == 0.75
    finally:
        ch.close()
