"""Feeds :class:`~agl_stream.client.recent_spans.RecentSpans` from ``agl.spans``, and tells when it has read far enough.

Every partition is read (no consumer group), from its end when the feed starts: the feed answers for rollouts
enqueued after that moment (by more than the margin for clock differences), whose spans are all written after it.
Records are kept as bytes; nothing is decoded until a query asks for its rollout.

**Read-your-writes, across replicas.** A writer answers once the broker acknowledged its records (``acks=all``:
they are below the partition's high watermark). :meth:`SpanFeed.caught_up_to_now` asks the brokers for every
partition's end offset *after* the query arrived and waits until the feed has read that far, so whatever any
replica acknowledged before the query is in the answer. It costs one ListOffsets round trip per query; a feed
that cannot get there in time (the broker unreachable, the feed far behind) says so, and the caller reads
ClickHouse instead.

**Only what it follows.** The feed answers only while it reads every partition the topic has (a topic whose
metadata was not there when the feed started, or that grew, is taken up by the follow loop, which then starts
over from the end), and its coverage starts once the partitions' ends are known, not when it asked for them (a
slow answer must not cover rollouts whose first spans were written before those ends).

**A gap is never papered over.** The consumer does not reset a lost position by itself (``auto_offset_reset``
"none"): if records were deleted before the feed read them (it fell more than the retention behind), it drops
what it holds, answers only for rollouts enqueued from then on, and goes on from the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from agl_stream.client.recent_spans import COVERAGE_MARGIN_S, RecentSpans
from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer

logger = logging.getLogger(__name__)


class SpanFeed:
    def __init__(self, settings: Settings, *, max_bytes: int = 256 * 1024 * 1024, max_rollouts: int = 100_000,
                 margin: float = COVERAGE_MARGIN_S, poll_timeout: float = 0.2,
                 fetch_max_wait_ms: Optional[int] = None) -> None:  # fmt: skip
        """``fetch_max_wait_ms``: None, the broker's wait for a hop something waits on (a query waits for the feed)."""
        self.settings = settings
        self.topic = settings.topic("spans")
        self.spans = RecentSpans(time.time(), max_bytes=max_bytes, max_rollouts=max_rollouts, margin=margin)
        self.poll_timeout = poll_timeout
        wait = {"latency_critical": True} if fetch_max_wait_ms is None else {"fetch_max_wait_ms": fetch_max_wait_ms}
        self._consumer = RecordConsumer(settings, [self.topic], group_id=None, auto_offset_reset="none", **wait)
        # the end offsets a query waits for come over a connection of their own: a broker answers one request per
        # connection at a time, so on the feed's connection a ListOffsets queued behind a fetch waiting for data
        # (up to fetch_max_wait_ms) and every query paid that wait (82 ms a query_spans on upstream's benchmark)
        self._offsets = RecordConsumer(settings, [], group_id=None)
        self._read_to: dict[TopicPartition, int] = {}  # per partition: the next offset to read
        self._progress = asyncio.Condition()
        self._task: Optional[asyncio.Task[None]] = None
        self.records = 0
        self.gaps = 0
        self._said_missing = False

    async def start(self) -> "SpanFeed":
        if self._task is not None:
            return self
        await self._consumer.start()
        await self._offsets.start()
        await self._offsets.raw._client.add_topic(self.topic)  # noqa: SLF001 - its leaders, for ListOffsets
        await self._read_from_now()
        self._task = asyncio.create_task(self._follow(), name=f"span-feed-{self.topic}")
        return self

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        try:
            await self._consumer.stop(commit=False)
        finally:
            await self._offsets.stop(commit=False)

    async def _read_from_now(self) -> None:
        """Every partition from its end, and the coverage from the moment the ends are known: a rollout enqueued
        after it (by more than the margin for clock differences) writes its first span after those ends."""
        raw = self._consumer.raw
        partitions = list(raw.assignment())
        ends = await raw.end_offsets(partitions)
        self._read_to.clear()
        for tp in partitions:
            raw.seek(tp, ends[tp])
            self._read_to[tp] = ends[tp]
        self.spans.forget_all(time.time())

    def _missing_partitions(self) -> set[TopicPartition]:
        """Partitions of the topic (as the client's metadata has it) the feed does not read; all of them when the
        metadata has none."""
        known = self._consumer.raw.partitions_for_topic(self.topic)
        if not known:
            return {TopicPartition(self.topic, -1)}  # nothing known: nothing can be answered for
        return {TopicPartition(self.topic, p) for p in known} - set(self._read_to)

    async def _follow_every_partition(self) -> None:
        """Take up partitions the feed does not read yet (the topic had no metadata at start, or grew): read them
        all from their ends, answering only for rollouts enqueued from then on."""
        raw = self._consumer.raw
        await self._consumer.refresh_metadata()
        known = raw.partitions_for_topic(self.topic)
        if not known:
            return
        logger.warning("%s: following %d of its %d partitions; taking up the rest and starting over from the end",
                       self.topic, len(self._read_to), len(known))  # fmt: skip
        raw.assign([TopicPartition(self.topic, p) for p in sorted(known)])
        await self._read_from_now()

    async def _follow(self) -> None:
        next_check = 0.0
        while True:
            try:
                if time.monotonic() >= next_check:  # cheap (cached metadata), but no need to look every poll
                    next_check = time.monotonic() + 1.0
                    if self._missing_partitions():
                        await self._follow_every_partition()
                records = await self._consumer.getmany(timeout=self.poll_timeout)
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRangeError as exc:
                await self._lost_records(exc)
                continue
            except Exception as exc:  # a broker hiccup: the consumer reconnects by itself
                logger.warning("%s: read failed (%r); retrying", self.topic, exc)
                await asyncio.sleep(0.5)
                continue
            for record in records:
                rollout_id = record.key.decode() if record.key else ""
                if record.value is not None and rollout_id:
                    self.spans.add(rollout_id, record.value, record.timestamp / 1000)
                self._read_to[TopicPartition(record.topic, record.partition)] = record.offset + 1
            self.records += len(records)
            async with self._progress:
                self._progress.notify_all()

    async def _lost_records(self, exc: OffsetOutOfRangeError) -> None:
        self.gaps += 1
        logger.error("%s: records were deleted before this front door read them (%s); answering only for rollouts "
                     "enqueued from now on, the older ones from ClickHouse", self.topic, exc)  # fmt: skip
        await self._read_from_now()

    async def caught_up_to_now(self, timeout: float) -> bool:
        """Wait until everything acknowledged on ``agl.spans`` before this call is read; False when not in time (or
        while the feed does not read every partition of the topic)."""
        missing = self._missing_partitions()
        if missing:
            if not self._said_missing:  # once per episode, not once per query
                logger.warning("%s: not reading %s yet; answering from ClickHouse", self.topic, sorted(missing))
                self._said_missing = True
            return False
        self._said_missing = False
        try:
            ends = await asyncio.wait_for(self._offsets.raw.end_offsets(list(self._read_to)), timeout)
        except Exception as exc:  # noqa: BLE001 - the caller falls back to ClickHouse, and says why in the log
            logger.warning("%s: end offsets unavailable (%r)", self.topic, exc)
            return False
        deadline = time.monotonic() + timeout
        async with self._progress:
            while any(self._read_to.get(tp, 0) < end for tp, end in ends.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    await asyncio.wait_for(self._progress.wait(), left)
                except asyncio.TimeoutError:
                    return False
        return True
