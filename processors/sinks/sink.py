"""One topic -> one ClickHouse table, at least once, never skipping data.

The loop: collect decoded records until ``batch_size`` records or ``max_wait`` seconds after the
first one, convert them to rows (records that cannot be decoded or converted become dead letters),
insert the rows and the dead letters, and only then mark the records done and commit their
offsets. The next batch is collected while one is written (one write in flight, in order). A failed insert is retried with exponential backoff for as long as it takes; nothing is
committed meanwhile, so a crash at any point replays the uncommitted records, and the tables'
ReplacingMergeTree keys collapse the replayed rows.

Backpressure: a sink holds at most two batches (the one being written and the next one), i.e.
``max_pending`` = 2 x ``batch_size`` records, reported in its health with ``pending``. While it
waits for a slow or failing insert it does not poll, and aiokafka prefetches at most one fetch
(``max_partition_fetch_bytes``) per partition, so a slow ClickHouse leaves the backlog in Kafka
(consumer lag) instead of in this process's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, TypeVar

import pyarrow as pa
from aiokafka.structs import ConsumerRecord
from tenacity import RetryCallState

from agl_stream.config import Settings
from agl_stream.kafka import DeadLetterWriter, RecordConsumer, RecordProducer
from agl_stream.serialization import RecordError, decode
from agl_stream.service import Backoff, RetryStopped, retrying
from agl_stream.types import DeadLetter
from agl_stream_processors.clickhouse.client import ClickHouse
from agl_stream_processors.clickhouse.columns import ColumnBatch, RowError
from agl_stream_processors.sinks.specs import DEAD_LETTER_SPEC, SinkSpec

logger = logging.getLogger(__name__)

T = TypeVar("T")
Rejected = tuple[str, str, ConsumerRecord]  # (reason, error type, record): a dead letter to write
Kept = tuple[ConsumerRecord, Optional[list[dict[str, object]]]]  # a converted record; rows None: from its bytes


class SinkStopped(Exception):
    """The sink was asked to stop while a write was still failing; nothing was committed."""


@dataclass(frozen=True)
class SinkOptions:
    batch_size: int = 1000  # larger batches save little CPU (an insert costs ~7 ms) and hold more memory
    max_wait: Optional[float] = None  # None: each sink's own (SinkSpec.max_wait)
    poll_timeout: float = 0.5
    retry_initial: float = 0.2
    retry_max: float = 10.0


@dataclass
class SinkStats:
    records: int = 0
    rows: int = 0
    fast_records: int = 0  # records turned into rows straight from their bytes (see Sink._rows)
    dead_letters: int = 0
    batches: int = 0
    retries: int = 0
    commits: int = 0
    last_error: Optional[str] = None
    last_record_at: float = field(default_factory=time.monotonic)
    ready: bool = False  # partitions assigned
    caught_up: bool = False  # as of the last idle poll: every record up to the high watermarks was fetched
    pending: int = 0  # records fetched and not yet written
    max_pending: int = 0  # the bound on ``pending``: two batches (see the module docstring)

    def as_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "rows": self.rows,
            "fast_records": self.fast_records,
            "dead_letters": self.dead_letters,
            "batches": self.batches,
            "retries": self.retries,
            "pending": self.pending,
            "max_pending": self.max_pending,
            "ready": self.ready,
            "caught_up": self.caught_up,
            "last_error": self.last_error,
        }


@dataclass
class _Batch:
    records: list[ConsumerRecord] = field(default_factory=list)  # decoded with the rows, in the writer thread


class Sink:
    def __init__(
        self,
        spec: SinkSpec,
        settings: Settings,
        ch: ClickHouse,
        dlq: Optional[RecordProducer],
        options: SinkOptions = SinkOptions(),
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.ch = ch
        self.dlq = DeadLetterWriter(settings.topic("dlq"), dlq, f"sink-{spec.name}") if dlq is not None else None
        # the rows of the dead_letters table (the topic's letters are counted by self.dlq when sent)
        self._letters = DeadLetterWriter(settings.topic("dlq"), None, f"sink-{spec.name}")
        self.options = options
        self.topic = settings.topic(spec.topic)
        self.stats = SinkStats(max_pending=2 * options.batch_size)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def max_wait(self) -> float:
        return self.options.max_wait if self.options.max_wait is not None else self.spec.max_wait

    async def run(self, stop: asyncio.Event) -> SinkStats:
        """Collect the next batch while the previous one is written (at most one write in flight, in order)."""
        consumer = RecordConsumer(
            self.settings, [self.topic], self.spec.group_id, max_poll_records=self.options.batch_size,
            latency_critical=self.spec.latency_critical, fetch_min_bytes=self.spec.min_fetch_bytes,
        )
        await consumer.start()
        logger.info("sink %s: %s -> table %s (group %s)", self.name, self.topic, self.spec.table, self.spec.group_id)
        writing: Optional[asyncio.Task[None]] = None
        try:
            while True:
                batch = await self._collect(consumer, stop)
                if writing is not None:
                    await writing  # batches are written and committed in order
                    writing = None
                if batch.records:  # on stop too: a graceful shutdown writes what it already fetched
                    writing = asyncio.create_task(self._flush(consumer, batch, stop))
                if stop.is_set():
                    break
            if writing is not None:
                await writing
        except SinkStopped:
            logger.warning("sink %s stopped with an unwritten batch; it will be re-read on restart", self.name)
        finally:
            if writing is not None and not writing.done():
                writing.cancel()
                await asyncio.gather(writing, return_exceptions=True)
            await consumer.stop(commit=True)
        return self.stats

    # ---------------------------------------------------------------- collecting

    async def _collect(self, consumer: RecordConsumer, stop: asyncio.Event) -> _Batch:
        batch = _Batch()
        deadline: Optional[float] = None
        while not stop.is_set():
            if deadline is None:
                timeout = self.options.poll_timeout
            else:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
            room = self.options.batch_size - len(batch.records)
            records = await consumer.getmany(timeout=timeout, max_records=room)
            if not self.stats.ready and consumer.raw.assignment():
                self.stats.ready = True
                self.stats.last_record_at = time.monotonic()  # idle time counts from the assignment, not from start
            batch.records.extend(records)
            self.stats.caught_up = not records and await consumer.caught_up()
            if records:
                self.stats.last_record_at = time.monotonic()
                self.stats.pending += len(records)
                if deadline is None:
                    deadline = time.monotonic() + self.max_wait
            if len(batch.records) >= self.options.batch_size or not batch.records:
                break  # full, or an idle poll: hand back so the caller re-checks ``stop``
        return batch

    # ---------------------------------------------------------------- writing

    def _rows(self, batch: _Batch) -> tuple[pa.Table, list[Rejected]]:
        """Rows of the decodable records; records that cannot be decoded or converted are the rejects.

        The spec's builder takes the rows of a record our own encoder wrote straight from its bytes
        where it can (``add_record``); anything it does not vouch for is decoded and validated by the
        model, as every record of the other sinks is."""
        bad: list[Rejected] = []
        builder = self.spec.new_builder()
        kept: list[Kept] = []
        for record in batch.records:
            try:
                if builder.add_record(record.value, record.timestamp):
                    self.stats.fast_records += 1
                    kept.append((record, None))
                    continue
                rows = self.spec.to_rows(decode(record.value, self.spec.model), record.timestamp)
            except RecordError as err:
                bad.append((err.reason, type(err).__name__, record))
                continue
            except (RowError, ValueError, TypeError) as exc:
                bad.append((self._unconvertible(exc), type(exc).__name__, record))
                continue
            builder.add_rows(rows)
            kept.append((record, rows))
        try:
            return builder.to_arrow(), bad
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            pass  # isolate the offending records below
        return self._isolate(kept, bad), bad

    def _isolate(self, kept: list[Kept], bad: list[Rejected]) -> pa.Table:
        """The batch without the records whose values arrow refused (rare: checked row by row, via the model)."""
        builder = self.spec.new_builder()
        check = ColumnBatch(self.spec.schema)
        for record, rows in kept:
            try:
                if rows is None:  # the model's rows are the fast path's (a test holds that)
                    rows = self.spec.to_rows(decode(record.value, self.spec.model), record.timestamp)
                for row in rows:
                    check.check_row(row)
            except RecordError as err:
                bad.append((err.reason, type(err).__name__, record))
                continue
            except (RowError, ValueError, TypeError) as exc:
                bad.append((self._unconvertible(exc), type(exc).__name__, record))
                continue
            builder.add_rows(rows)
        return builder.to_arrow()

    def _unconvertible(self, exc: Exception) -> str:
        return f"cannot convert to {self.spec.table} rows: {exc}"

    def _dead_letter(self, reason: str, error_type: str, record: ConsumerRecord) -> DeadLetter:
        return self._letters.letter(reason, record=record, error_type=error_type)

    async def _flush(self, consumer: RecordConsumer, batch: _Batch, stop: asyncio.Event) -> None:
        table, bad = await asyncio.to_thread(self._rows, batch)  # CPU-bound: keep the loop (heartbeats) responsive
        letters = [self._dead_letter(reason, kind, record) for reason, kind, record in bad]
        await self._retry(lambda: self.ch.ainsert_arrow(self.spec.table, table), stop, f"insert into {self.spec.table}")
        if letters:
            await self._write_dead_letters(letters, bad, stop)
        consumer.done_many(batch.records)
        self.stats.records += len(batch.records)
        self.stats.rows += table.num_rows
        self.stats.dead_letters += len(letters)
        self.stats.batches += 1
        self.stats.pending -= len(batch.records)  # fetched but not yet written (the next batch may be collecting)
        try:
            if await consumer.commit():
                self.stats.commits += 1
        except Exception as exc:  # a rebalance in progress; the batch will be re-read and deduplicated
            self.stats.last_error = f"commit failed: {exc!r}"
            logger.warning("sink %s: commit failed (records will be re-read): %r", self.name, exc)

    async def _write_dead_letters(
        self, letters: list[DeadLetter], bad: list[tuple[str, str, ConsumerRecord]], stop: asyncio.Event
    ) -> None:
        """Dead letters go to the table (with the full original bytes) and to the DLQ topic."""
        first = letters[0]
        logger.warning(
            "sink %s: %d dead letter(s) in this batch; first %s[%s]@%s: %s",
            self.name, len(letters), first.source_topic, first.partition, first.offset, first.reason,
        )  # fmt: skip
        dead = ColumnBatch(DEAD_LETTER_SPEC.schema)
        for letter in letters:
            dead.rows.extend(DEAD_LETTER_SPEC.to_rows(letter, None))
        table = dead.to_arrow()
        await self._retry(lambda: self.ch.ainsert_arrow(DEAD_LETTER_SPEC.table, table), stop, "insert into dead_letters")
        writer = self.dlq
        if writer is not None and self.spec is not DEAD_LETTER_SPEC:  # never feed the DLQ its own rejects

            async def publish() -> None:
                futures = [await writer.send(reason, record=record, error_type=kind) for reason, kind, record in bad]
                await asyncio.gather(*futures)

            await self._retry(publish, stop, f"publish to {writer.topic}")

    async def _retry(self, action: Callable[[], Awaitable[T]], stop: asyncio.Event, what: str) -> T:
        """``action`` until it succeeds (nothing is committed meanwhile), or the service stops (SinkStopped)."""

        def note(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            self.stats.retries += 1
            self.stats.last_error = f"{what}: {error!r}"[:500]
            logger.error("sink %s: %s failed (attempt %d, retrying in %.1fs): %r", self.name, what, state.attempt_number,
                         state.upcoming_sleep, error)  # fmt: skip

        try:
            async for attempt in retrying(what, backoff=Backoff(self.options.retry_initial, self.options.retry_max),
                                          stop=stop, before_sleep=note):  # fmt: skip
                with attempt:
                    result = await action()
        except RetryStopped:
            raise SinkStopped(what) from None
        if attempt.retry_state.attempt_number > 1:
            logger.info("sink %s: %s succeeded after %d retries", self.name, what, attempt.retry_state.attempt_number - 1)
            self.stats.last_error = None
        return result

