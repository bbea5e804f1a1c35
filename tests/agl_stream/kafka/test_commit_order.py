"""Commits land in order: an older offset never overwrites a newer one in the group.

aiokafka serializes one try of a commit, not the commit: between a retriable failure and its retry it lets
go of its lock, so a later commit can land first and the earlier one's retry then moves the group's offset
back (the nemesis seed-101 run at 20,000 rollouts: the runners' group handed 7 claimed tasks out again).
A real consumer on the real broker, whose first commit is held back as a retry's backoff would hold it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from agl_stream import Settings
from agl_stream.kafka import RecordConsumer
from agl_stream.kafka._options import connection_options


async def _group_offset(consumer: RecordConsumer, tp: TopicPartition) -> int:
    return (await consumer.raw.committed(tp)) or -1


async def test_a_commit_held_back_by_a_retry_does_not_move_the_group_offset_back(topics: Settings) -> None:
    topic = topics.topic("tasks")
    producer = AIOKafkaProducer(**connection_options(topics))
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, f"task-{i}".encode(), partition=0)
    finally:
        await producer.stop()

    async with RecordConsumer(topics, [topic], group_id=topics.group("commit-order")) as consumer:
        records: list[Any] = []
        for _ in range(60):
            records += [r for r in await consumer.getmany(timeout=0.5) if r.partition == 0]
            if len(records) >= 10:
                break
        assert len(records) == 10
        tp = TopicPartition(topic, 0)

        send = consumer.raw.commit
        landed: list[int] = []

        async def commit_with_a_slow_first_try(offsets: Any) -> None:
            if not landed and offsets[tp].offset == 5:
                await asyncio.sleep(1.0)  # a retriable failure's backoff, the lock let go meanwhile
            await send(offsets)
            landed.append(offsets[tp].offset)

        consumer.raw.commit = commit_with_a_slow_first_try  # type: ignore[method-assign]
        consumer.done_many(records[:5])
        first = asyncio.create_task(consumer.commit())  # offset 5, held back
        await asyncio.sleep(0.1)
        consumer.done_many(records[5:])
        second = await consumer.commit()  # offset 10, while the first is still in its backoff
        await first

        assert landed == sorted(landed), f"commits landed out of order: {landed}"
        assert await _group_offset(consumer, tp) == 10
        assert consumer.is_committed(records[-1]) and second in ({}, {tp: 10})
