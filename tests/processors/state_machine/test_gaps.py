"""Input records faust's stream skipped are read from the topic and applied in order (real broker).

The nemesis (seed 202) saw the state machine apply ``started`` events and never the ``finished`` events a
few offsets later in the same partition: faust dropped them around a rebalance. The agent expects each
partition's next offset; a record beyond it makes it read the range in between first.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

import pytest
from aiokafka.structs import RecordMetadata

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.serialization import decode, encode
from agl_stream.types import Attempt, AttemptedRollout, AttemptEvent, RolloutSnapshot
from agl_stream_processors.state_machine.app import RolloutStateMachine
from agl_stream_processors.state_machine.gaps import GapReader
from tests.processors.state_machine.test_span_liveness import RecordingTopic

pytestmark = pytest.mark.integration


class FaustLikeMessage:
    def __init__(self, topic: str, meta: RecordMetadata, value: bytes, key: bytes) -> None:
        self.topic, self.partition, self.offset = topic, meta.partition, meta.offset
        self.value, self.key, self.timestamp = value, key, meta.timestamp / 1000.0


class FaustLikeEvent:
    def __init__(self, message: FaustLikeMessage) -> None:
        self.message = message
        self.headers: dict[str, bytes] = {}


class Stream:
    """Stands in for faust's stream: hands the agent the events given, in order (some skipped on purpose)."""

    def __init__(self, events: list[FaustLikeEvent]) -> None:
        self._events = events

    async def events(self) -> AsyncIterator[FaustLikeEvent]:
        for event in self._events:
            yield event


def task(rid: str) -> AttemptedRollout:
    return AttemptedRollout(rollout_id=rid, input={"q": rid}, mode="train",
                            attempt=Attempt(rollout_id=rid, attempt_id="at-" + rid[-8:], sequence_id=1))  # fmt: skip


def event(rid: str, kind: str, status: Optional[str] = None) -> AttemptEvent:
    return AttemptEvent(kind=kind, rollout_id=rid, attempt_id="at-" + rid[-8:], attempt_sequence_id=1,  # type: ignore[arg-type]
                        status=status, worker_id="Worker-0")  # type: ignore[arg-type]  # fmt: skip


async def machine_with_reader(settings: Settings) -> tuple[RolloutStateMachine, RecordingTopic, GapReader]:
    sm = RolloutStateMachine(settings)
    rollouts = RecordingTopic()
    sm._table = {}  # noqa: SLF001 - the faust table's mapping interface is all the rules path uses
    sm._rollouts = rollouts  # noqa: SLF001
    sm._tasks = RecordingTopic()  # noqa: SLF001
    reader = GapReader(settings, read_committed=False)
    await reader.start()
    sm._gaps = reader  # noqa: SLF001
    return sm, rollouts, reader


async def test_records_the_stream_skipped_are_read_from_the_topic_and_applied_before_the_next(topics: Settings) -> None:
    rid, other = "ro-00000000ga01", "ro-00000000ga02"
    attempts = topics.topic("attempts")
    records = [(topics.topic("tasks"), task(rid)), (attempts, event(rid, "started")),
               (attempts, event(rid, "finished", "succeeded")), (attempts, event(other, "started"))]  # fmt: skip
    messages: list[FaustLikeMessage] = []
    async with RecordProducer(topics) as producer:
        for topic, value in records:  # all keyed by rid: one partition, in this order
            meta = await producer.send_and_wait(topic, value, key=rid)
            messages.append(FaustLikeMessage(topic, meta, encode(value), rid.encode()))
    task_msg, started_msg, finished_msg, later = messages
    assert finished_msg.offset == started_msg.offset + 1 and later.offset == finished_msg.offset + 1

    sm, rollouts, reader = await machine_with_reader(topics)
    try:
        sm._processed_to[(attempts, started_msg.partition)] = started_msg.offset  # noqa: SLF001 - the committed offset
        # faust hands over the task and 'started', drops 'finished', then goes on with the next record
        await sm._agent(Stream([FaustLikeEvent(task_msg), FaustLikeEvent(started_msg), FaustLikeEvent(later)]))  # noqa: SLF001
    finally:
        await reader.stop()

    state = sm._load(rid)  # noqa: SLF001
    assert state is not None and state.rollout.status == "succeeded", "the skipped 'finished' event was never applied"
    assert sm.counts["input_gaps"] == 1 and sm.counts["input_gap_records"] == 1
    assert sm._processed_to[(attempts, later.partition)] == later.offset + 1  # noqa: SLF001
    assert decode(rollouts.sent[-1], RolloutSnapshot).rollout.status == "succeeded"


async def test_the_gap_reader_finds_the_last_record_time_and_the_offset_at_a_time(topics: Settings) -> None:
    reader = GapReader(topics, read_committed=False)
    await reader.start()
    try:
        topic = topics.topic("attempts")
        assert await reader.last_record_time(topic, 0) is None  # an empty partition
        async with RecordProducer(topics) as producer:
            first = await producer.send_and_wait(topic, event("ro-00000000ga03", "started"), partition=0)
            await asyncio.sleep(0.05)
            second = await producer.send_and_wait(topic, event("ro-00000000ga03", "heartbeat"), partition=0)
        assert await reader.last_record_time(topic, 0) == pytest.approx(second.timestamp / 1000.0)
        assert await reader.offset_at(topic, 0, first.timestamp / 1000.0) == first.offset
        assert await reader.offset_at(topic, 0, second.timestamp / 1000.0) == second.offset
        assert await reader.offset_at(topic, 0, second.timestamp / 1000.0 + 60) == second.offset + 1  # none after it: the end
        got = await reader.read(topic, 0, first.offset, second.offset + 1)
        assert [r.offset for r in got] == [first.offset, second.offset]
    finally:
        await reader.stop()
