"""Records faust's stream skipped: read them straight from the topic, so the agent applies every record in order.

The nemesis (seed 202 at 20,000 rollouts) saw the state machine apply the ``started`` events of ten
attempts after a rebalance and never their ``finished`` events, a few offsets further in the same
partition, while faust's read offset was past them; the watchdog then found the attempts silent and ran
ten succeeded rollouts again. The likely path, in faust's code: its consumer thread hands each fetched
record to the stream or gives up when a rebalance suspends the flow, and notes the offset as read
(``_read_offset``) either way, so the fetches after the rebalance can go on past a dropped record.

The agent knows the next offset it expects per input partition (from the committed offset after a
rebalance, then each record + 1). A record beyond it means the records in between never reached the
agent: :class:`GapReader` reads exactly that range with a plain consumer (no group, no commits) and
the agent applies them before the record that revealed the gap. Offsets that hold no record (a
transaction's end marker, or records deleted by retention) simply yield nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping, Optional

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from agl_stream.config import Settings
from agl_stream.kafka import connection_options, start_with_retry
from agl_stream_processors.topic_range import read_range


class GapReader:
    """One plain consumer, assigned on demand, that reads ``[start, end)`` of a topic partition."""

    def __init__(self, settings: Settings, *, read_committed: bool) -> None:
        self.settings = settings
        self.read_committed = read_committed
        self._consumer: Optional[AIOKafkaConsumer] = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(
            **connection_options(self.settings), group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest",  # a range that retention removed starts at the log's start
            isolation_level="read_committed" if self.read_committed else "read_uncommitted",
        )  # fmt: skip
        await start_with_retry(consumer, "state machine gap reader", 30.0)
        # let aiokafka's background task take its first step: a consumer stopped before that raises
        # CancelledError from its stop() (its no-group coordinator awaits a task cancelled before it ran)
        await asyncio.sleep(0)
        self._consumer = consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()

    async def read(self, topic: str, partition: int, start: int, end: int, timeout: float = 30.0) -> list[ConsumerRecord]:
        """The records at offsets ``start <= offset < end``, in order; TimeoutError if they cannot be read in time."""
        if self._consumer is None:
            raise RuntimeError("gap reader not started")
        async with self._lock:
            return await read_range(self._consumer, TopicPartition(topic, partition), start, end, timeout)

    async def last_record_time(self, topic: str, partition: int, timeout: float = 30.0) -> Optional[float]:
        """Produce time (epoch seconds) of the partition's last record; None when it holds none."""
        if self._consumer is None:
            raise RuntimeError("gap reader not started")
        tp = TopicPartition(topic, partition)
        async with self._lock:
            consumer = self._consumer
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            first = (await consumer.beginning_offsets([tp]))[tp]
            if end <= first:
                return None
            consumer.seek(tp, end - 1)
            deadline = time.monotonic() + timeout
            latest: Optional[float] = None
            while await consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not read the last record of {topic}[{partition}] within {timeout:.0f}s")
                batches = await consumer.getmany(tp, timeout_ms=200, max_records=100)
                for record in batches.get(tp, []):
                    latest = record.timestamp / 1000.0
            return latest

    async def offset_at(self, topic: str, partition: int, when: float) -> int:
        """The first offset of a record produced at or after ``when`` (epoch seconds); the end offset if none is."""
        if self._consumer is None:
            raise RuntimeError("gap reader not started")
        tp = TopicPartition(topic, partition)
        async with self._lock:
            found = (await self._consumer.offsets_for_times({tp: int(when * 1000)}))[tp]
            if found is not None:
                return int(found.offset)
            return int((await self._consumer.end_offsets([tp]))[tp])


class RecordEvent:
    """A record read by :class:`GapReader`, shaped like the faust events the agent handles."""

    def __init__(self, record: ConsumerRecord) -> None:
        self.message = _Message(record)
        self.headers: Mapping[str, Any] = dict(record.headers or ())


class _Message:
    def __init__(self, record: ConsumerRecord) -> None:
        self.topic: str = record.topic
        self.partition: int = record.partition
        self.offset: int = record.offset
        self.key: Optional[bytes] = record.key
        self.value: Optional[bytes] = record.value
        self.timestamp: float = record.timestamp / 1000.0  # faust's messages carry seconds
