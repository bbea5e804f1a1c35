"""Stream time (:meth:`RecordConsumer.read_through`) on the real broker: what a consumer has read, per partition."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer, TopicPartition

from agl_stream import Settings
from agl_stream.kafka import RecordConsumer
from agl_stream.kafka._options import connection_options


async def _read(consumer: RecordConsumer, count: int, max_records: int | None = None) -> list[object]:
    got: list[object] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.getmany(timeout=0.5, max_records=max_records)
    assert len(got) >= count, got
    return got


async def _caught_up(consumer: RecordConsumer, since: float) -> float:
    """Poll until stream time reaches ``since`` (every partition read to its end after it); return it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        await consumer.getmany(timeout=0.2)
        through = await consumer.read_through()
        if through is not None and through >= since:
            return through
    raise AssertionError(f"stream time never reached {since}: {await consumer.read_through()}")


async def test_stream_time_is_the_least_read_partitions_time(topics: Settings) -> None:
    topic = topics.topic("triplets")  # two partitions (the test settings)
    hour_ago_ms = int((time.time() - 3600) * 1000)
    producer = AIOKafkaProducer(**connection_options(topics))
    await producer.start()
    try:
        for i in range(5):  # a backlog (its records stamped an hour ago) on partition 1, before the consumer starts
            await producer.send_and_wait(topic, b"old", partition=1, timestamp_ms=hour_ago_ms + i * 1000)
        async with RecordConsumer(topics, [topic], group_id=None) as consumer:
            assert await consumer.read_through() is None  # nothing fetched yet: unknown, never "now"
            first = await _read(consumer, 1, max_records=1)
            assert first[0].partition == 1
            # partition 1 is read up to its first record: stream time is that record's, not the clock's
            assert await consumer.read_through() == hour_ago_ms / 1000

            await _read(consumer, 4)
            before_end = time.time() - 1
            await _caught_up(consumer, before_end)  # both read to their ends: the time of the latest fetch

            tp1 = TopicPartition(topic, 1)
            consumer.raw.pause(tp1)  # cut off from partition 1 (as from the broker that leads it)
            await asyncio.sleep(0.5)
            cut_at = await consumer.read_through()
            assert cut_at is not None
            await producer.send_and_wait(topic, b"unread", partition=1)
            for _ in range(3):  # partition 0 keeps being fetched, and gets new records
                await producer.send_and_wait(topic, b"read", partition=0)
            await _read(consumer, 3)
            await asyncio.sleep(1.0)
            await consumer.getmany(timeout=0.5)
            assert await consumer.read_through() == cut_at  # time does not pass for the partition not read

            consumer.raw.resume(tp1)
            after = time.time()
            assert [r.value for r in await _read(consumer, 1)] == [b"unread"]
            assert await _caught_up(consumer, after) >= after
    finally:
        await producer.stop()
