"""Spans reach the state machine beside faust (the liveness reader): a change a span brings is
computed from the rollout's state as it is when the state machine's lock is taken, never from a
copy read before a task or attempt event was applied. Pure logic: the table and the output topics
are in-memory stand-ins; the broker path is covered by test_state_machine.py and the fault suite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.serialization import decode, encode
from agl_stream.types import Attempt, AttemptedRollout, RolloutSnapshot, Span
from agl_stream_processors.state_machine import rules
from agl_stream_processors.state_machine.app import RolloutStateMachine

R, A = "ro-000000000001", "at-00000001"


class RecordingTopic:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, key: bytes, value: bytes) -> Any:
        self.sent.append(value)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def machine() -> tuple[RolloutStateMachine, RecordingTopic]:
    sm = RolloutStateMachine(Settings())
    rollouts = RecordingTopic()
    sm._table = {}  # noqa: SLF001 - the faust table's mapping interface is all the rules path uses
    sm._rollouts = rollouts  # noqa: SLF001
    sm._tasks = RecordingTopic()  # noqa: SLF001
    return sm, rollouts


def span() -> bytes:
    return encode(Span(rollout_id=R, attempt_id=A, sequence_id=1, trace_id="t", span_id="s", name="llm"))


def task() -> AttemptedRollout:
    return AttemptedRollout(rollout_id=R, input={"q": 1}, mode="train",
                            attempt=Attempt(rollout_id=R, attempt_id=A, sequence_id=1))  # fmt: skip


async def test_a_span_waiting_for_the_lock_does_not_overwrite_the_task_applied_meanwhile() -> None:
    sm, rollouts = machine()
    async with sm._lock:  # noqa: SLF001 - the faust agent is applying the task
        waiting = asyncio.create_task(sm._span_seen(span(), 1.0))  # noqa: SLF001 - the rollout is unknown yet
        await asyncio.sleep(0)
        assert not waiting.done()
        await sm._apply(rules.on_task(None, task(), 0.5))  # noqa: SLF001
    await waiting
    state = sm._load(R)  # noqa: SLF001
    assert state is not None and state.has_task, "the span's stale copy replaced the task's state"
    assert (state.rollout.status, state.attempt.status) == ("running", "running")  # type: ignore[union-attr]
    published = [decode(v, RolloutSnapshot).rollout.status for v in rollouts.sent]
    assert published == ["queuing", "running"]


async def test_heartbeats_of_a_running_attempt_change_nothing_and_need_no_lock() -> None:
    sm, rollouts = machine()
    await sm._apply(rules.on_task(None, task(), 0.5))  # noqa: SLF001
    await sm._span_seen(span(), 1.0)  # noqa: SLF001 - makes it running
    sent = len(rollouts.sent)
    async with sm._lock:  # noqa: SLF001 - a heartbeat must not wait on the agent
        await asyncio.wait_for(sm._span_seen(span(), 2.0), timeout=1.0)  # noqa: SLF001
    assert len(rollouts.sent) == sent and sm._last_seen[R] == 2.0  # noqa: SLF001
    await sm._span_seen(b"junk", 3.0)  # noqa: SLF001
    assert sm.counts["unreadable_spans"] == 1 and sm.counts["spans"] == 2


@pytest.mark.integration
async def test_a_partition_reassigned_while_its_batch_is_handled_leaves_the_readers_clock(topics: Settings) -> None:
    """Seed 303: a span waited out a rebalance; meanwhile the recovery reassigned the reader. The rest of the old
    batch then put its partition back into the read progress, stuck at that record's time: the watchdog's clock
    stopped there, and a rollout whose runner died was never judged unresponsive."""
    import time

    from aiokafka import AIOKafkaProducer

    from agl_stream.kafka import connection_options
    from agl_stream_processors.state_machine.liveness import SpanLivenessReader

    producer = AIOKafkaProducer(**connection_options(topics))
    await producer.start()
    try:
        for partition in (0, 0, 0, 1):
            await producer.send_and_wait(topics.topic("spans"), span(), partition=partition)
    finally:
        await producer.stop()
    seen: list[bytes] = []

    async def on_span(value: bytes | None, now: float) -> None:
        if not seen:
            await reader.assign([1])  # what the state machine's recovery does, while this span waits
        seen.append(value or b"")

    reader = SpanLivenessReader(topics, f"{topics.topic_prefix}-liveness-test", on_span)
    await reader.start()
    stop = asyncio.Event()
    try:
        await reader.assign([0, 1])
        running = asyncio.create_task(reader.run(stop))
        await asyncio.sleep(3.0)
        lag = reader.progress.lag_seconds(time.time())
        stop.set()
        await asyncio.wait_for(running, 10)
    finally:
        await reader.stop()
    assert lag is not None and lag < 2.0, f"the reader's clock is {lag} s behind: a reassigned partition stayed in it"


async def test_a_partition_revoked_while_its_position_is_read_is_skipped_not_a_crash() -> None:
    """Nemesis seed 303 (d8aa692): the watchdog's note of faust's fetches awaited a partition's position,
    the partition was revoked meanwhile, and aiokafka's ``last_poll_timestamp`` asserted: the app crashed."""
    from types import SimpleNamespace

    from aiokafka import TopicPartition

    sm = RolloutStateMachine(Settings())
    kept, revoked = TopicPartition(sm.settings.topic("tasks"), 0), TopicPartition(sm.settings.topic("tasks"), 1)
    assigned = {kept, revoked}

    class Raw:
        def last_poll_timestamp(self, tp: TopicPartition) -> int:
            assert tp in assigned, "Partition is not assigned"  # aiokafka's own check
            return 1_000

    class Consumer:
        _thread = SimpleNamespace(_ensure_consumer=Raw)

        def assignment(self) -> set[TopicPartition]:
            return set(assigned)

        async def position(self, tp: TopicPartition) -> int:
            if tp == revoked:
                assigned.discard(revoked)  # a rebalance while the position was awaited
            return 7

        def highwater(self, tp: TopicPartition) -> int:
            assert tp in assigned, "Partition is not assigned"
            return 7

    sm._app = SimpleNamespace(consumer=Consumer())  # noqa: SLF001
    await sm._note_fetches()  # noqa: SLF001 - raised AssertionError before the fix
    assert sm._progress.lag_seconds(2.0) is not None  # noqa: SLF001 - the partition still held was noted
