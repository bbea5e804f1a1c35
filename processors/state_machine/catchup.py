"""Read a changelog to its real end, for brokers that report end offsets too low (Tansu; run only there).

faust restores a table by reading its changelog up to the partitions' end offsets. The local Tansu
broker reports the end offset of a partition whose last batch holds several records as that
batch's base offset + 1, so faust stops before the newest changelog records and restores stale
states. The high watermark in *fetch responses* is right, so this reads the given partitions from
the beginning until the consumer position reaches the fetched high watermark and returns the last
value per key (None for a tombstone). Against Apache Kafka it finds nothing to correct.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from agl_stream.config import Settings
from agl_stream.kafka import connection_options, read_to_fetched_end, start_with_retry


async def read_to_end(
    settings: Settings, topic: str, partitions: Sequence[int], timeout: float = 60.0
) -> dict[bytes, Optional[bytes]]:
    """Latest value per key in ``partitions`` of ``topic`` (compacted-topic semantics)."""
    latest: dict[bytes, Optional[bytes]] = {}
    if not partitions:
        return latest
    consumer = AIOKafkaConsumer(**connection_options(settings), group_id=None, enable_auto_commit=False)
    await start_with_retry(consumer, "changelog reader", 30.0)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        pending = set(tps)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} {sorted(partitions)} to its end within {timeout:.0f}s")
            batches = await consumer.getmany(*pending, timeout_ms=200, max_records=10_000)
            for records in batches.values():
                for record in records:
                    if record.key is not None:
                        latest[record.key] = record.value
            for tp in list(pending):
                if await read_to_fetched_end(consumer, tp):
                    pending.discard(tp)
        return latest
    finally:
        await consumer.stop()
