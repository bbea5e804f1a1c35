"""The faust state machine against a real broker: retries, max_attempts, cancel, late and duplicate events."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Callable, Optional

import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.types import (
    Attempt,
    AttemptedRollout,
    AttemptEvent,
    DeadLetter,
    RolloutConfig,
    RolloutControl,
    RolloutSnapshot,
    Span,
)
from agl_stream_processors.state_machine import RolloutStateMachine, StateMachineOptions, retry_attempt_id

pytestmark = pytest.mark.integration

FAST = StateMachineOptions(scan_interval=0.1, retention_seconds=600)


class Harness:
    """A running state machine plus a producer and followers of agl.rollouts and agl.tasks."""

    def __init__(self, settings: Settings, machine: RolloutStateMachine, producer: RecordProducer) -> None:
        self.settings = settings
        self.machine = machine
        self.producer = producer
        self.snapshots: dict[str, list[RolloutSnapshot]] = {}
        self.tasks: list[AttemptedRollout] = []
        self.changed = asyncio.Condition()

    async def follow(self, short: str, model: type, sink: Callable[[object], None]) -> None:  # type: ignore[type-arg]
        async with RecordConsumer(self.settings, [self.settings.topic(short)], None) as consumer:
            while True:
                good, _ = await consumer.get_decoded(model, timeout=0.1)
                if good:
                    async with self.changed:
                        for d in good:
                            sink(d.value)
                        self.changed.notify_all()

    def _snapshot(self, snap: object) -> None:
        assert isinstance(snap, RolloutSnapshot)
        self.snapshots.setdefault(snap.rollout.rollout_id, []).append(snap)

    async def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 45.0) -> None:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(predicate), timeout)
            except asyncio.TimeoutError:
                raise AssertionError(f"timed out waiting for {what}; snapshots: {self.statuses()}") from None

    def latest(self, rid: str) -> Optional[RolloutSnapshot]:
        return self.snapshots[rid][-1] if self.snapshots.get(rid) else None

    def statuses(self) -> dict[str, list[tuple[str, Optional[str], int]]]:
        return {
            rid: [(s.rollout.status, s.attempt.status if s.attempt else None, s.attempts) for s in snaps]
            for rid, snaps in self.snapshots.items()
        }

    async def wait_status(self, rid: str, status: str, attempts: Optional[int] = None) -> RolloutSnapshot:
        def ok() -> bool:
            snap = self.latest(rid)
            return snap is not None and snap.rollout.status == status and (attempts is None or snap.attempts == attempts)

        await self.wait_for(f"{rid} -> {status}", ok)
        snap = self.latest(rid)
        assert snap is not None
        return snap

    async def wait_requeue(self, rid: str, sequence_id: int) -> AttemptedRollout:
        def found() -> bool:
            return any(t.rollout_id == rid and t.attempt.sequence_id == sequence_id for t in self.tasks)

        await self.wait_for(f"requeue of {rid} as attempt {sequence_id}", found)
        return next(t for t in self.tasks if t.rollout_id == rid and t.attempt.sequence_id == sequence_id)

    async def wait_count(self, name: str, at_least: int) -> None:
        deadline = asyncio.get_running_loop().time() + 45
        while self.machine.counts[name] < at_least:
            assert asyncio.get_running_loop().time() < deadline, f"counter {name}: {dict(self.machine.counts)}"
            await asyncio.sleep(0.05)

    # -- what agl_stream.client and the runner would write

    async def enqueue(self, rid: str, config: RolloutConfig) -> AttemptedRollout:
        task = AttemptedRollout(
            rollout_id=rid, input={"n": rid}, mode="train", config=config,
            attempt=Attempt(rollout_id=rid, attempt_id="at-" + rid[-8:], sequence_id=1),
        )  # fmt: skip
        await self.producer.send_and_wait(self.settings.topic("tasks"), task, key=rid)
        return task

    async def event(self, task: AttemptedRollout, kind: str, status: Optional[str] = None) -> None:
        ev = AttemptEvent(
            kind=kind, rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id,  # type: ignore[arg-type]
            attempt_sequence_id=task.attempt.sequence_id, status=status, worker_id="Worker-0", span_count=1,  # type: ignore[arg-type]
        )  # fmt: skip
        await self.producer.send_and_wait(self.settings.topic("attempts"), ev, key=task.rollout_id)

    async def span(self, task: AttemptedRollout) -> None:
        span = Span(rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id, sequence_id=1,
                    trace_id="0" * 32, span_id="1" * 16, name="work")  # fmt: skip
        await self.producer.send_and_wait(self.settings.topic("spans"), span, key=task.rollout_id)

    async def run_attempt(self, task: AttemptedRollout, status: str) -> None:
        await self.event(task, "started")
        await self.span(task)
        await self.event(task, "finished", status)


@contextlib.asynccontextmanager
async def harness(settings: Settings, options: StateMachineOptions = FAST) -> AsyncIterator[Harness]:
    machine = RolloutStateMachine(settings, options)
    stop = asyncio.Event()
    task = asyncio.create_task(machine.run(stop))
    ready = asyncio.create_task(machine.ready.wait())
    done, _ = await asyncio.wait({task, ready}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    assert ready in done, "state machine did not recover its table"
    async with RecordProducer(settings) as producer:
        h = Harness(settings, machine, producer)
        followers = [
            asyncio.create_task(h.follow("rollouts", RolloutSnapshot, h._snapshot)),
            asyncio.create_task(h.follow("tasks", AttemptedRollout, h.tasks.append)),  # type: ignore[arg-type]
        ]
        try:
            yield h
        finally:
            for f in followers:
                f.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
            stop.set()
            await asyncio.wait_for(task, 60)


async def test_timeout_unresponsive_and_failure_are_retried_and_finish_later(topics: Settings) -> None:
    async with harness(topics) as h:
        timeout = await h.enqueue("ro-000000000a01", RolloutConfig(timeout_seconds=0.5, max_attempts=2, retry_condition=["timeout"]))
        silent = await h.enqueue("ro-000000000a02", RolloutConfig(unresponsive_seconds=2.0, max_attempts=2, retry_condition=["unresponsive"]))
        failing = await h.enqueue("ro-000000000a03", RolloutConfig(max_attempts=3, retry_condition=["failed"]))
        await h.wait_status(timeout.rollout_id, "queuing")
        await h.event(timeout, "started")  # ...and never finishes
        await h.event(silent, "started")
        await h.span(silent)  # running, then silent
        await h.wait_status(silent.rollout_id, "running")
        await h.run_attempt(failing, "failed")

        for first in (timeout, silent, failing):
            retry = await h.wait_requeue(first.rollout_id, 2)
            assert retry.attempt.attempt_id == retry_attempt_id(first.rollout_id, 2) != first.attempt.attempt_id
            assert retry.status == "requeuing" and retry.input == first.input and retry.config == first.config
            await h.run_attempt(retry, "succeeded")
            done = await h.wait_status(first.rollout_id, "succeeded", attempts=2)
            assert done.attempt is not None and done.attempt.attempt_id == retry.attempt.attempt_id
            assert done.rollout.end_time is not None

        history = h.statuses()
        assert ("requeuing", "timeout", 1) in history[timeout.rollout_id]
        assert ("requeuing", "unresponsive", 1) in history[silent.rollout_id]
        assert ("requeuing", "failed", 1) in history[failing.rollout_id]
        assert h.machine.counts["requeued"] == 3


async def test_silence_is_judged_by_what_was_read_not_the_wall_clock(topics: Settings) -> None:
    """A live attempt is not requeued while the spans that keep it alive wait unread (the reader cannot fetch)."""
    async with harness(topics) as h:
        alive = await h.enqueue("ro-000000000a04", RolloutConfig(unresponsive_seconds=1.5, max_attempts=2, retry_condition=["unresponsive"]))
        await h.event(alive, "started")
        await h.span(alive)
        await h.wait_status(alive.rollout_id, "running")
        reader = h.machine._spans._consumer  # noqa: SLF001 - stand in for a reader cut from its broker
        assert reader is not None
        reader.pause(*reader.assignment())
        for _ in range(12):  # 3.6 s of spans, more than twice the silence allowed, none read
            await h.span(alive)
            await asyncio.sleep(0.3)
        lag = h.machine.input_lag_seconds(time.time())
        assert lag is not None and lag > 1.5, lag
        reader.resume(*reader.assignment())
        await asyncio.sleep(1.0)  # read, and judged again once caught up
        await h.event(alive, "finished", "succeeded")
        await h.wait_status(alive.rollout_id, "succeeded", attempts=1)
        assert all(status != "requeuing" for status, _, _ in h.statuses()[alive.rollout_id])
        assert h.machine.counts["requeued"] == 0


async def test_max_attempts_exhausted_cancel_and_late_duplicate_events(topics: Settings) -> None:
    async with harness(topics) as h:
        doomed = await h.enqueue("ro-000000000b01", RolloutConfig(max_attempts=2, retry_condition=["failed"]))
        await h.run_attempt(doomed, "failed")
        retry = await h.wait_requeue(doomed.rollout_id, 2)
        await h.run_attempt(retry, "failed")
        failed = await h.wait_status(doomed.rollout_id, "failed", attempts=2)
        assert failed.attempt is not None and failed.attempt.status == "failed"
        assert not any(t.rollout_id == doomed.rollout_id and t.attempt.sequence_id == 3 for t in h.tasks)

        lucky = await h.enqueue("ro-000000000b02", RolloutConfig(max_attempts=3, retry_condition=["failed"]))
        await h.run_attempt(lucky, "failed")
        second = await h.wait_requeue(lucky.rollout_id, 2)
        await h.event(second, "started")
        await h.span(second)
        await h.wait_status(lucky.rollout_id, "running", attempts=2)
        # the first attempt reports success late, and repeats itself: it must not touch attempt 2
        await h.event(lucky, "finished", "succeeded")
        await h.event(lucky, "finished", "succeeded")
        await h.span(lucky)
        await h.wait_count("superseded_event", 2)
        await h.wait_count("superseded_activity", 1)
        assert h.latest(lucky.rollout_id).rollout.status == "running"  # type: ignore[union-attr]
        await h.event(second, "finished", "succeeded")
        await h.event(second, "finished", "failed")  # a repeated 'finished' with another status
        await h.wait_count("duplicate_finished", 1)
        done = await h.wait_status(lucky.rollout_id, "succeeded", attempts=2)
        assert done.attempt is not None and done.attempt.attempt_id == second.attempt.attempt_id
        assert len([t for t in h.tasks if t.rollout_id == lucky.rollout_id]) == 2  # no extra requeue

        cancelled = await h.enqueue("ro-000000000b03", RolloutConfig(max_attempts=3, retry_condition=["failed"]))
        await h.event(cancelled, "started")
        await h.wait_status(cancelled.rollout_id, "preparing")
        control = RolloutControl(rollout_id=cancelled.rollout_id, reason="user asked")
        await h.producer.send_and_wait(topics.topic("attempts"), control, key=cancelled.rollout_id,
                                       headers={"agl-kind": "control"})  # fmt: skip
        snap = await h.wait_status(cancelled.rollout_id, "cancelled")
        assert snap.rollout.end_time is not None
        await h.event(cancelled, "finished", "failed")
        await h.wait_count("late_event", 1)
        assert h.latest(cancelled.rollout_id).rollout.status == "cancelled"  # type: ignore[union-attr]
        assert not any(t.rollout_id == cancelled.rollout_id and t.attempt.sequence_id == 2 for t in h.tasks)


async def test_thousand_bad_records_are_dead_lettered_and_good_ones_processed(topics: Settings) -> None:
    n_bad, n_good = 1000, 20
    garbage = [b"garbage", b'{"schema":"task","v":1,"data":{"rollout_id":5}}', b'{"schema":"task","v":7,"data":{}}', None]
    async with harness(topics) as h:
        futures, good = [], []
        for i in range(n_bad):
            if i % (n_bad // n_good) == 0:
                good.append(await h.enqueue(f"ro-{len(good):012x}", RolloutConfig()))
            topic = topics.topic("tasks" if i % 3 else "attempts")
            headers = {"agl-kind": "control"} if i % 7 == 0 and topic.endswith("attempts") else None
            futures.append(await h.producer.send(topic, garbage[i % len(garbage)], key=f"k{i}", headers=headers))
        await h.producer.send(topics.topic("spans"), b"not a span", key="s")
        await asyncio.gather(*futures)
        for task in good:
            await h.run_attempt(task, "succeeded")
        for task in good:
            await h.wait_status(task.rollout_id, "succeeded")
        # at least once: a record replayed after the first rebalance is dead-lettered again; its letter names
        # the same source position (which is also the dead_letters table's key, so the table keeps one)
        by_position: dict[tuple[str, int, int], DeadLetter] = {}
        async with RecordConsumer(topics, [topics.topic("dlq")], None) as consumer:
            for _ in range(300):
                got, _ = await consumer.get_decoded(DeadLetter, timeout=0.1)
                by_position.update(((d.value.source_topic, d.value.partition, d.value.offset), d.value) for d in got)  # type: ignore[misc]
                if len(by_position) >= n_bad:
                    break
        letters = list(by_position.values())
        assert len(letters) == n_bad
        assert all(letter.processor == "state-machine" and letter.reason for letter in letters)
        assert sorted(letter.payload for letter in letters) == sorted(garbage[i % len(garbage)] or b"" for i in range(n_bad))
        assert h.machine.counts["unreadable_spans"] == 1  # spans are dead-lettered by their owners
        counted = h.machine.health()["dead_letters"]
        assert set(counted) == {"invalid_record"} and counted["invalid_record"] >= n_bad  # replays count again


async def test_state_survives_a_restart_through_the_changelog(topics: Settings) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    async with harness(topics) as h:
        task = await h.enqueue("ro-000000000d01", config)
        await h.event(task, "started")
        await h.span(task)
        await h.wait_status(task.rollout_id, "running")
    async with harness(topics) as h:
        assert h.machine.health()["rollouts_in_table"] == 1
        await h.event(task, "finished", "failed")  # the restored config still drives the retry
        retry = await h.wait_requeue(task.rollout_id, 2)
        await h.run_attempt(retry, "succeeded")
        await h.wait_status(task.rollout_id, "succeeded", attempts=2)


async def test_a_stale_state_written_late_to_the_changelog_does_not_come_back_at_recovery(topics: Settings) -> None:
    """A paused instance (a zombie) writes a rollout's older state to the changelog after its owner wrote the
    terminal one. Replayed last-wins, the rollout came back 'running' and the watchdog ran it again (the
    nemesis: two final trajectories for one rollout). The replay keeps the highest revision instead."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from agl_stream.kafka import connection_options
    from agl_stream.serialization import encode
    from agl_stream_processors.state_machine.app import CHANGELOG
    from agl_stream_processors.state_machine.rules import RolloutState

    config = RolloutConfig(unresponsive_seconds=2.0, max_attempts=3, retry_condition=["unresponsive"])
    rid = "ro-00000000z0mb"
    async with harness(topics) as h:
        task = await h.enqueue(rid, config)
        await h.event(task, "started")
        await h.span(task)
        await h.wait_status(rid, "running")
        await h.event(task, "finished", "succeeded")
        await h.wait_status(rid, "succeeded")
    # the zombie's late write: the 'running' state the owner wrote earlier, written again after the terminal one
    changelog = CHANGELOG.name(topics)
    reader = AIOKafkaConsumer(**connection_options(topics), enable_auto_commit=False, auto_offset_reset="earliest")
    await reader.start()
    try:
        partitions = [TopicPartition(changelog, p) for p in range(topics.partitions)]
        reader.assign(partitions)
        ends = await reader.end_offsets(partitions)
        records = []
        deadline = time.monotonic() + 30
        while [tp for tp in partitions if await reader.position(tp) < ends[tp]] and time.monotonic() < deadline:
            for batch in (await reader.getmany(timeout_ms=500)).values():
                records += [r for r in batch if r.key == rid.encode()]
    finally:
        await reader.stop()
    running = [r for r in records if b'"status":"running"' in r.value]
    assert running and b'"revision":' in records[-1].value, [r.value[-40:] for r in records]
    writer = AIOKafkaProducer(**connection_options(topics))
    await writer.start()
    try:
        await writer.send_and_wait(changelog, running[-1].value, key=rid.encode(), partition=running[-1].partition)
        # and its snapshot of that state, stamped with the zombie's clock after the pause: newer than the owner's
        stale = RolloutState.model_validate_json(running[-1].value).snapshot().model_copy(update={"updated_at": time.time()})
        await writer.send_and_wait(topics.topic("rollouts"), encode(stale), key=rid.encode())
    finally:
        await writer.stop()
    async with harness(topics) as h:
        await asyncio.sleep(config.unresponsive_seconds + 3)  # the watchdog would have requeued a 'running' one
        assert not any(t.rollout_id == rid and t.attempt.sequence_id == 2 for t in h.tasks), "the rollout ran again"
        state = h.machine._load(rid)
        assert state is not None and state.rollout.status == "succeeded", state
        assert h.machine.counts["stale_changelog_records"] >= 1
        # readers of agl.rollouts keep the newest updated_at: that must be the owner's state, asserted again
        newest = max(h.snapshots[rid], key=lambda snap: snap.updated_at)
        assert newest.rollout.status == "succeeded" and newest.updated_at > stale.updated_at, h.statuses()[rid]


async def test_a_second_instance_takes_partitions_and_the_first_stops_watching_them(topics: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Keys of partitions a rebalance moved away are ignored, so no rollout is watched (and requeued) by two instances."""
    config = RolloutConfig(unresponsive_seconds=2.0, max_attempts=3, retry_condition=["unresponsive"])
    async with harness(topics) as h:
        tasks = [await h.enqueue(f"ro-00000000e{i:03d}", config) for i in range(12)]
        for task in tasks:
            await h.event(task, "started")
            await h.span(task)
        for task in tasks:
            await h.wait_status(task.rollout_id, "running")

        async def alive() -> None:  # every attempt shows signs of life all along
            while True:
                for task in tasks:
                    await h.span(task)
                await asyncio.sleep(0.3)

        beating = asyncio.create_task(alive())
        second = RolloutStateMachine(topics.model_copy(update={"data_dir": tmp_path / "second"}), FAST)
        stop = asyncio.Event()
        running = asyncio.create_task(second.run(stop))
        try:
            await asyncio.wait_for(second.ready.wait(), 60)
            await asyncio.sleep(5.0)  # more than twice the silence allowed, after the rebalance
            beating.cancel()
            for task in tasks:
                await h.event(task, "finished", "succeeded")
            for task in tasks:
                await h.wait_status(task.rollout_id, "succeeded", attempts=1)
            owned_by_second = second.health()["rollouts_in_table"]
        finally:
            beating.cancel()
            stop.set()
            await asyncio.wait_for(running, 60)
        assert owned_by_second > 0, owned_by_second  # the group gave the second instance partitions
        assert h.machine.counts["revoked_keys_ignored"] > 0
        assert h.machine.counts["requeued"] == 0 and second.counts["requeued"] == 0


async def test_finished_rollouts_leave_the_table_and_late_events_cannot_resurrect_them(topics: Settings) -> None:
    async with harness(topics, StateMachineOptions(scan_interval=0.1, retention_seconds=0.5)) as h:
        task = await h.enqueue("ro-000000000f01", RolloutConfig())
        await h.run_attempt(task, "succeeded")
        await h.wait_status(task.rollout_id, "succeeded")
        await h.wait_count("expired", 1)
        assert h.machine.health()["rollouts_in_table"] == 0
        published = len(h.snapshots[task.rollout_id])
        await h.event(task, "started")  # a very late duplicate about a rollout that is gone
        await h.wait_count("expired", 2)  # the stray state is dropped after the same retention...
        assert len(h.snapshots[task.rollout_id]) == published  # ...and never overwrote the final snapshot
        assert h.latest(task.rollout_id).rollout.status == "succeeded"  # type: ignore[union-attr]


async def test_a_replay_without_committed_offsets_does_not_bring_back_rollouts_the_table_forgot(  # type: ignore[no-untyped-def]
    topics: Settings, tmp_path
) -> None:
    """Seed 202 at 20,000 rollouts: the group's offsets read as missing after a coordinator moved, the inputs were
    replayed from offset 0, and 2,529 rollouts that had succeeded long before (forgotten by the table after
    ``retention_seconds``) were filed again as ``queuing``. A replay starts within ``retention_seconds`` of the
    table's last change in the partition instead."""
    options = StateMachineOptions(scan_interval=0.1, retention_seconds=1.0)
    async with harness(topics, options) as h:
        old = await h.enqueue("ro-000000000r01", RolloutConfig())
        await h.run_attempt(old, "succeeded")
        await h.wait_status(old.rollout_id, "succeeded")
        await h.wait_count("expired", 1)
        assert h.machine._load(old.rollout_id) is None  # noqa: SLF001 - forgotten on purpose
        recent = await h.enqueue("ro-000000000r02", RolloutConfig())
        await h.wait_status(recent.rollout_id, "queuing")
    # a group without committed offsets, over the same changelog: what the coordinator move looked like
    fresh = StateMachineOptions(scan_interval=0.1, retention_seconds=1.0, group_id=f"{topics.topic_prefix}-sm-fresh")
    async with harness(topics.model_copy(update={"data_dir": tmp_path / "fresh"}), fresh) as h:
        await h.wait_count("rewound_partitions", 1)
        await h.wait_count("duplicate_task", 1)  # the replay reached the recent rollout's task
        await asyncio.sleep(1.0)  # the replay runs on: anything it would re-file is published by now
        assert h.latest(old.rollout_id).rollout.status == "succeeded", h.statuses()[old.rollout_id]  # type: ignore[union-attr]
        assert h.machine._load(old.rollout_id) is None  # noqa: SLF001
        state = h.machine._load(recent.rollout_id)  # noqa: SLF001 - restored from the changelog, still waiting
        assert state is not None and state.rollout.status == "queuing"
        assert h.machine.counts["replay_horizon_skipped"] >= 1  # the old rollout's records: older than the table's memory


async def test_a_recovery_faust_reports_complete_with_partitions_unread_does_not_go_live(topics: Settings) -> None:
    """Seed 303: a rebalance in the middle of faust's recovery made faust call the recovery callbacks while the
    newly assigned changelog partitions were unread. The state machine now checks faust's own recovery offsets
    and waits for the recovery that follows (faust's bookkeeping set to what its rebalance leaves behind)."""
    from faust.types import TP

    from agl_stream_processors.state_machine.app import CHANGELOG

    async with harness(topics) as h:
        recovery = h.machine._app.tables.recovery  # noqa: SLF001
        unread = TP(CHANGELOG.name(topics), 0)
        saved = (set(recovery.active_tps), dict(recovery.active_highwaters))
        recovery.active_tps.add(unread)
        recovery.active_highwaters.pop(unread, None)  # assigned after the ending recovery measured them
        try:
            recovered_at = h.machine._recovered_at  # noqa: SLF001
            await h.machine._on_recover()  # noqa: SLF001 - what faust calls
            assert h.machine.counts["premature_recoveries"] == 1
            assert h.machine._recovered_at == recovered_at  # noqa: SLF001 - it did not go live on a partial table
        finally:
            recovery.active_tps.clear()
            recovery.active_tps.update(saved[0])
            recovery.active_highwaters.update(saved[1])
        await h.machine._on_recover()  # noqa: SLF001 - the recovery that follows, complete
        assert h.machine.counts["premature_recoveries"] == 1 and h.machine._recovered_at > recovered_at  # noqa: SLF001


async def test_a_span_read_during_a_rebalance_waits_for_the_table_and_is_dropped_if_its_partition_moved(
    topics: Settings,
) -> None:
    """A span that changes a state (here: it comes before its task, so it creates the state) is held while faust
    rebalances: the table may be partly recovered, and a state created from the span would win over the recovered
    one, task lost (seed 303). After the rebalance it applies if the rollout's partition is still this instance's."""
    async with harness(topics) as h:
        app = h.machine._app  # noqa: SLF001
        while app.rebalancing:  # the start's own rebalance ends just after the table is ready ("worker ready")
            await asyncio.sleep(0.05)
        kept = AttemptedRollout(rollout_id="ro-000000000h01", input={}, attempt=Attempt(
            rollout_id="ro-000000000h01", attempt_id="at-0000h01", sequence_id=1))  # fmt: skip
        app.rebalancing = True  # what faust sets from the revocation to "worker ready"
        try:
            await h.span(kept)
            await h.wait_count("spans_held_in_rebalance", 1)
            await asyncio.sleep(0.5)
            assert h.machine._load(kept.rollout_id) is None  # noqa: SLF001 - held, not applied
        finally:
            app.rebalancing = False
        await h.wait_count("span_before_task", 1)
        state = h.machine._load(kept.rollout_id)  # noqa: SLF001
        assert state is not None and state.rollout.status == "running"

        moved = AttemptedRollout(rollout_id="ro-000000000h02", input={}, attempt=Attempt(
            rollout_id="ro-000000000h02", attempt_id="at-0000h02", sequence_id=1))  # fmt: skip
        app.rebalancing = True
        try:
            await h.span(moved)
            await h.wait_count("spans_held_in_rebalance", 2)
            h.machine._owned_partitions = lambda: set()  # type: ignore[method-assign] # the rebalance took them all
        finally:
            app.rebalancing = False
        await h.wait_count("spans_of_revoked_partitions", 1)
        assert h.machine._load(moved.rollout_id) is None  # noqa: SLF001 - its new owner watches it


async def test_heartbeats_keep_an_attempt_alive_before_its_first_span(topics: Settings) -> None:
    """An agent whose spans come at the end (a controller's command: its reward and process record) is
    ``preparing`` until then; its runner's heartbeats must keep it from being judged unresponsive (the controller's
    chaos scenario: attempts that heartbeat every second were requeued after ``unresponsive_seconds``)."""
    config = RolloutConfig(unresponsive_seconds=1.5, max_attempts=3, retry_condition=["unresponsive"])
    async with harness(topics) as h:
        task = await h.enqueue("ro-000000000b01", config)
        await h.event(task, "started")
        for _ in range(10):  # 5 s of heartbeats, no span
            await asyncio.sleep(0.5)
            await h.event(task, "heartbeat")
        await h.span(task)
        await h.event(task, "finished", "succeeded")
        snap = await h.wait_status(task.rollout_id, "succeeded")
        assert snap.attempts == 1 and not any(t.attempt.sequence_id > 1 for t in h.tasks if t.rollout_id == task.rollout_id)


async def test_terminal_rollouts_held_are_capped_oldest_first(topics: Settings) -> None:
    """Memory stays flat whatever the rate: past ``max_terminal_held`` the oldest finished rollouts go early."""
    options = StateMachineOptions(scan_interval=0.1, retention_seconds=600, max_terminal_held=2)
    async with harness(topics, options) as h:
        tasks = [await h.enqueue(f"ro-00000000c{i:03d}", RolloutConfig()) for i in range(5)]
        for task in tasks:
            await h.run_attempt(task, "succeeded")
            await h.wait_status(task.rollout_id, "succeeded")
        await h.wait_count("expired_over_cap", 3)
        assert h.machine.health()["rollouts_in_table"] == 2
        assert h.machine.counts["expired"] == 0  # none of them reached the 600 s retention
        for task in tasks:  # every rollout's final snapshot stays on the compacted topic
            assert h.latest(task.rollout_id).rollout.status == "succeeded"  # type: ignore[union-attr]


async def test_client_cancel_reaches_the_state_machine(topics: Settings) -> None:
    """``StoreClient.cancel_rollout`` (upstream's update_rollout(status="cancelled")) cancels a queued rollout."""
    from agl_stream.client import StoreClient

    async with harness(topics) as h, StoreClient(topics) as client:
        rollout = await client.enqueue_rollout({"q": 1}, mode="train")
        await h.wait_status(rollout.rollout_id, "queuing")
        await client.cancel_rollout(rollout.rollout_id, reason="operator")
        snap = await h.wait_status(rollout.rollout_id, "cancelled")
        assert snap.rollout.end_time is not None
        done = await client.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=30)
        assert [r.status for r in done] == ["cancelled"]
