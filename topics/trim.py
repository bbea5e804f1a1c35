"""Trim what every reader has read: delete a topic's records below the offsets all consumer groups committed.

Kafka deletes by age (``retention.ms``) or size (``retention.bytes``), never by whether anyone still
needs a record. A run on one machine wants the other rule: keep a record until every reader has it
(the sinks have it in ClickHouse, the triplet processor has adapted it, the runners have claimed
the task), then let it go, so the disk holds the backlog and not the history.

For each partition of the catalog's delete-policy topics, the new log start is the lowest offset
committed by any consumer group that has committed on that partition, and never past the first
record younger than ``min_age`` seconds (a reader that has not committed yet, e.g. one starting
late, has that long). A partition no group has committed on is left alone. The broker then drops
whole segments below the new start (``DeleteRecords``; the active segment stays until it rolls).
A group that stopped for good holds its partitions back until the broker forgets its offsets
(``offsets.retention.minutes``, 7 days), or until ``retention.ms`` removes the records anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete

from agl_stream.config import Settings
from agl_stream.kafka import connection_options, start_with_retry
from agl_stream_topics.catalog import CATALOG, TopicSpec

logger = logging.getLogger(__name__)

DEFAULT_MIN_AGE_S = 300.0


@dataclass(frozen=True)
class Trimmed:
    partition: TopicPartition
    before: int  # log start offset before
    after: int  # log start offset now
    groups: int  # groups whose commits bound it


async def committed_floors(admin: AIOKafkaAdminClient, topics: set[str]) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(lowest committed offset, number of groups) per partition of ``topics``, over every consumer group."""
    floors: dict[TopicPartition, int] = {}
    groups: dict[TopicPartition, int] = {}
    for entry in await admin.list_consumer_groups():
        group_id = entry[0]
        offsets = await admin.list_consumer_group_offsets(group_id)
        for tp, meta in offsets.items():
            if tp.topic in topics and meta.offset >= 0:
                floors[tp] = min(floors.get(tp, meta.offset), meta.offset)
                groups[tp] = groups.get(tp, 0) + 1
    return floors, groups


async def trim_committed(
    settings: Settings, *, min_age: float = DEFAULT_MIN_AGE_S, specs: Sequence[TopicSpec] = CATALOG
) -> list[Trimmed]:
    """One pass: move each delete topic's log start up to what every group committed (see the module doc)."""
    topics = {s.name(settings) for s in specs if s.cleanup_policy == "delete"}
    admin = AIOKafkaAdminClient(**connection_options(settings), request_timeout_ms=15_000)
    await start_with_retry(admin, "admin", 30.0)
    consumer = AIOKafkaConsumer(**connection_options(settings), group_id=None, enable_auto_commit=False)
    await start_with_retry(consumer, "offset reader", 30.0)
    try:
        floors, groups = await committed_floors(admin, topics)
        if not floors:
            return []
        parts = list(floors)
        starts = await consumer.beginning_offsets(parts)
        young = await consumer.offsets_for_times({tp: int((time.time() - min_age) * 1000) for tp in parts})
        targets: dict[TopicPartition, int] = {}
        for tp, floor in floors.items():
            limit = young.get(tp)
            target = min(floor, limit.offset) if limit is not None else floor
            if target > starts[tp]:
                targets[tp] = target
        if not targets:
            return []
        await admin.delete_records({tp: RecordsToDelete(before_offset=off) for tp, off in targets.items()}, timeout_ms=15_000)
        done = [Trimmed(tp, starts[tp], off, groups[tp]) for tp, off in sorted(targets.items())]
        logger.info("trimmed %d partitions: %s", len(done),
                    ", ".join(f"{t.partition.topic}[{t.partition.partition}] {t.before}->{t.after}" for t in done))  # fmt: skip
        return done
    finally:
        await consumer.stop()
        await admin.close()


async def trim_forever(settings: Settings, stop: asyncio.Event, *, every: float, min_age: float = DEFAULT_MIN_AGE_S) -> int:
    """Trim every ``every`` seconds until ``stop``; a failed pass is logged and retried at the next tick."""
    while not stop.is_set():
        try:
            await trim_committed(settings, min_age=min_age)
        except Exception as exc:  # the broker restarting, a group rebalancing: the next pass catches up
            logger.warning("trim pass failed (retried in %.0f s): %s: %s", every, type(exc).__name__, exc)
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except asyncio.TimeoutError:
            pass
    return 0


def describe(trimmed: Optional[list[Trimmed]]) -> str:
    if not trimmed:
        return "nothing to trim"
    return "\n".join(f"{t.partition.topic}[{t.partition.partition}]: log start {t.before} -> {t.after} "
                     f"(lowest commit of {t.groups} group(s))" for t in trimmed)  # fmt: skip
