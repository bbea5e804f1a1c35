"""The triplet processor: ``agl.spans`` + ``agl.attempts`` -> one :class:`Trajectory` per attempt on ``agl.triplets``.

Why a plain consumer loop and not a faust agent: a span must stay uncommitted until the trajectory
built from it is acknowledged by the broker, which can be seconds to minutes after the span was
read (the attempt is still running). faust acknowledges an event once the agent moves past it;
:class:`~agl_stream.kafka.RecordConsumer` instead commits each partition only up to its first record
not yet marked done, which is at-least-once here: a crash replays every span of every attempt whose
trajectory was not acknowledged, and the adapter is deterministic, so the replayed trajectory is the
same (sinks dedupe by rollout_id + attempt_id).

Attempts interleave on a partition, so positional commits alone would let a crash replay *part* of
an attempt. Two rules make a restart replay each attempt whole or not at all:

* an attempt's span records are marked done only once its ``finished`` record is *committed* (the
  ``finished`` record itself is done when the trajectory is acknowledged). So a committed span
  implies a committed ``finished``: if ``finished`` replays, every span of the attempt replays too,
  and the attempt is adapted again from all of them;
* when ``finished`` is committed but some spans are not (they sit behind another attempt's span),
  those spans replay without their ``finished``. On every partition assignment the processor
  therefore reads the committed ``finished`` events that may belong to replayed spans (the
  ``agl.attempts`` partition from the replayed spans' timestamp minus a clock-skew margin, up to the
  committed offset) and settles their replayed spans silently (``replayed_spans``), instead of
  buffering them as an attempt that never finishes.

Both topics are keyed by rollout_id with the same partition count, so one consumer (one group
member) sees all spans and events of the attempts it owns, provided the group assigns partition p of
both topics to the same member: the range assignor does (per topic, the same ranges to the same
members), aiokafka's default round-robin does not once the group has three members (a restarted
replica beside the session of its killed predecessor is enough). A member handed one topic's
partition without the other's would adapt attempts from their ``finished`` event with none of their
spans: :func:`triplets_consumer` sets the range assignor and every assignment is checked.

One rollout, one training signal: a finished attempt leaves only with the state machine's decision
(:mod:`agl_stream_processors.triplets.decisions`), read from the snapshots on ``agl.rollouts``
(every partition, from the start, by a reader outside the consumer group, so a restart relearns
them): ``final`` for the attempt that ended the rollout, ``superseded`` for an attempt the rollout
moved past (a runner that stalled or lost the broker and reported after its attempt was retried).
Superseded trajectories still reach ``agl.triplets`` and ClickHouse, marked, for analysis; learners
train only ``final`` ones. An attempt the state machine never decides on within ``decision_seconds``
(a rollout it does not track: no task) leaves as ``undecided``, which is never trained either.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import CommitFailedError
from aiokafka.structs import ConsumerRecord

from agl_stream.adapter import TraceAdapter, TraceToMessages, build_adapter
from agl_stream.adapter.rewards import final_reward
from agl_stream.adapter.base import span_order_key
from agl_stream.config import Settings
from agl_stream.kafka import (
    DeadLetterWriter, RecordConsumer, RecordProducer, connection_options, hop_fetch_wait_ms, read_to_fetched_end,
    start_with_retry,
)
from agl_stream.serialization import RecordError, decode
from agl_stream.types import AttemptEvent, RolloutSnapshot, Span, Trajectory, Triplet
from agl_stream_processors.topic_range import read_range
from agl_stream_processors.read_progress import PROGRESS_INTERVAL_S, ReadProgress, note_fetches
from agl_stream_processors.triplets.buffer import AttemptBuffer, AttemptKey, PendingAttempt, SpanOutcome
from agl_stream_processors.triplets.decisions import Decision, Decisions

logger = logging.getLogger(__name__)

CONTROL_HEADER = "agl-kind"

#: the decision an adapted trajectory carries until the state machine's arrives
UNDECIDED = Decision("undecided", None)


@dataclass(frozen=True, slots=True)
class RecordRef:
    """Where a source record is (what marking it done and committing need), without its bytes."""

    topic: str
    partition: int
    offset: int

    @classmethod
    def of(cls, record: ConsumerRecord) -> "RecordRef":
        return cls(record.topic, record.partition, record.offset)


@dataclass(frozen=True)
class Adapted:
    """An adapted attempt waiting for the state machine's decision: its trajectory and its records' positions."""

    trajectory: Trajectory
    partition: Optional[int]
    finished: list[ConsumerRecord]  # its 'finished' record(s): done once the trajectory is acknowledged
    spans: list[RecordRef]  # done once the finished records are committed


@dataclass(frozen=True)
class TripletProcessorOptions:
    group_id: Optional[str] = None  # default "<topic prefix>-triplets" ("agl-triplets")
    grace_seconds: float = 30.0
    orphan_seconds: float = 900.0
    late_window_seconds: float = 3600.0
    restore_skew_seconds: float = 300.0  # producers' clock skew tolerated by the restore scan
    decision_seconds: float = 300.0  # a finished attempt waits this long for the state machine's decision
    poll_timeout: float = 0.2
    max_poll_records: int = 2000
    commit_interval: float = 1.0


#: undecided trajectories held for a late decision (each is its triplets' token ids: a few KB)
MAX_UNDECIDED_HELD = 10_000


class TripletProcessor:
    """A named app of ``agl-stream processors``: ``run(stop)`` until the event is set; ``health()`` counters."""

    name = "triplets"

    def __init__(
        self,
        settings: Settings,
        adapter: Union[str, TraceAdapter[Any]] = "tracer",
        options: TripletProcessorOptions = TripletProcessorOptions(),
    ) -> None:
        self.settings = settings
        self.adapter: TraceAdapter[Any] = build_adapter(adapter) if isinstance(adapter, str) else adapter
        if isinstance(self.adapter, TraceToMessages):
            raise ValueError("the triplet processor needs a triplet adapter; TraceToMessages produces chat messages")
        self.options = options
        self.spans_topic = settings.topic("spans")
        self.attempts_topic = settings.topic("attempts")
        self.triplets_topic = settings.topic("triplets")
        self.rollouts_topic = settings.topic("rollouts")
        self.buffer = AttemptBuffer(
            grace_seconds=options.grace_seconds,
            orphan_seconds=options.orphan_seconds,
            late_window_seconds=options.late_window_seconds,
        )
        self.decisions = Decisions(retention_seconds=options.late_window_seconds)
        # adapted attempts waiting for the state machine's decision: key -> (trajectory to be, since when)
        self._awaiting: dict[AttemptKey, tuple[Adapted, float]] = {}
        # trajectories that left undecided (the decision wait ran out): a late decision still makes them final
        self._undecided: dict[AttemptKey, tuple[Trajectory, float]] = {}
        self._rollouts_reader: Optional[AIOKafkaConsumer] = None
        self._emit_lock = asyncio.Lock()  # the main loop and the rollouts follower both emit
        self._last_prune = 0.0
        self.counts: Counter[str] = Counter()
        self.ready = asyncio.Event()  # set once partitions are assigned
        self._dlq: Optional[DeadLetterWriter] = None
        self._producer: Optional[RecordProducer] = None
        self._consumer: Optional[RecordConsumer] = None
        self._fatal: Optional[BaseException] = None
        self._in_flight = 0
        self._group_id = ""
        # (finished records, span records) of acknowledged trajectories whose finished is not committed yet
        self._deferred: list[tuple[list[ConsumerRecord], list[RecordRef]]] = []
        self.first_record_at: Optional[float] = None  # monotonic time the first records arrived
        self._spans_progress = ReadProgress()  # how far agl.spans was read: the grace period's clock
        self._attempts_progress = ReadProgress()  # how far agl.attempts was read: the orphan clock

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        group_id = self.options.group_id or f"{self.settings.topic_prefix}-triplets"
        consumer = triplets_consumer(self.settings, group_id, max_poll_records=self.options.max_poll_records)
        # transactions: one producer per host and group, so a restarted process takes its predecessor's id and
        # the coordinator aborts what that one left open at once (else read-committed consumers would wait for
        # the transaction timeout). One triplets process per host and group, then (a pod per replica).
        transactional_id = f"{group_id}-{socket.gethostname()}" if self.settings.kafka_transactions else None
        producer = RecordProducer(self.settings, transactional_id=transactional_id)
        await producer.start()
        try:
            await consumer.start()
            await self._start_rollouts_reader()
            if producer.transactional:
                consumer.committer = self._commit_transaction
                await producer.begin_transaction()
        except BaseException:
            await consumer.stop(commit=False)
            await producer.stop()
            raise
        self._consumer, self._producer, self._group_id = consumer, producer, group_id
        self._dlq = DeadLetterWriter(self.settings.topic("dlq"), producer, processor=self.name)
        logger.info(
            "triplets: %s + %s -> %s with %r", self.spans_topic, self.attempts_topic, self.triplets_topic, self.adapter
        )
        last_commit = last_progress = time.monotonic()
        follower = asyncio.create_task(self._follow_rollouts(stop), name="triplets-rollouts-follower")
        try:
            while not stop.is_set():
                if follower.done():
                    follower.result()  # the follower never returns while running: this raises its error
                    raise RuntimeError("triplets: the agl.rollouts follower stopped")
                records = await consumer.getmany(timeout=self.options.poll_timeout)
                if consumer.raw.assignment():
                    self.ready.set()
                await self._on_assignment(consumer)
                now = time.monotonic()
                if records and self.first_record_at is None:
                    self.first_record_at = now
                for record in records:
                    await self._ingest(record, now)
                self._prune_decisions(now)
                if time.monotonic() - last_progress >= PROGRESS_INTERVAL_S:
                    for progress, topic in ((self._spans_progress, self.spans_topic),
                                            (self._attempts_progress, self.attempts_topic)):  # fmt: skip
                        assigned = [tp for tp in consumer.raw.assignment() if tp.topic == topic]
                        await note_fetches(progress, consumer.raw, assigned, key=lambda tp: tp.partition,
                                           read_committed=self.settings.kafka_transactions)  # fmt: skip
                    last_progress = time.monotonic()
                spans_read_through = self._spans_progress.read_through(time.time())
                for item in self.buffer.take_ready(now, spans_read_through):
                    adapted = await self._adapt(item)
                    if adapted is not None:
                        self._awaiting[item.key] = (adapted, now)
                async with self._emit_lock:
                    await self._emit_decided(now)
                for item in self.buffer.take_abandoned(now, self._attempts_progress.read_through(time.time())):
                    await self._abandon(item)
                if self._fatal is not None:
                    message = f"triplets: a trajectory could not be produced: {self._fatal!r}"
                    raise RuntimeError(message) from self._fatal
                if time.monotonic() - last_commit >= self.options.commit_interval:
                    try:
                        await (self._commit_transaction() if producer.transactional else consumer.commit())
                    except CommitFailedError as exc:
                        # The group rebalanced under us (a broker restart expires every member): what was not
                        # committed is redelivered to the partitions' owners, whose replays are idempotent.
                        self.counts["commit_failures"] += 1
                        logger.warning("triplets: commit failed, records will be redelivered: %s", str(exc).split("\n")[0])
                    else:
                        self._release_deferred(consumer)
                    last_commit = time.monotonic()
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            try:
                await producer.flush(timeout=producer.delivery_timeout)
                if producer.transactional and self._fatal is None:
                    await self._commit_transaction(begin_next=False)
            finally:
                await consumer.stop(commit=self._fatal is None and not producer.transactional)
                await producer.stop()
                if self._rollouts_reader is not None:
                    await self._rollouts_reader.stop()

    def health(self) -> dict[str, Any]:
        return {
            **dict(self.counts),
            "dead_letters": dict(self._dlq.counts) if self._dlq else {},
            "pending_attempts": len(self.buffer.pending),
            "awaiting_decision": len(self._awaiting),
            "undecided_held": len(self._undecided),
            "rollouts_known": len(self.decisions.views),
            "remembered_attempts": self.buffer.remembered,
            "buffered_spans": self.buffer.buffered_spans,
            "deferred_settlements": len(self._deferred),
            "in_flight": self._in_flight,
            "ready": self.ready.is_set(),
        }

    # ------------------------------------------------------------------ decisions (agl.rollouts)

    async def _start_rollouts_reader(self) -> None:
        """Read every partition of ``agl.rollouts`` from the start, outside the group (see the module doc)."""
        reader = AIOKafkaConsumer(**connection_options(self.settings), group_id=None, enable_auto_commit=False,
                                  auto_offset_reset="earliest",
                                  fetch_max_wait_ms=await hop_fetch_wait_ms(self.settings))  # fmt: skip
        await start_with_retry(reader, "triplets rollouts reader", 30.0)
        partitions = [TopicPartition(self.rollouts_topic, p) for p in range(self.settings.partitions)]
        reader.assign(partitions)
        await reader.seek_to_beginning(*partitions)
        self._rollouts_reader = reader

    async def _follow_rollouts(self, stop: asyncio.Event) -> None:
        """Learn the state machine's decisions as its snapshots arrive and emit what they decide at once
        (not at the main loop's next poll: a rollout's triplet row should follow its status closely)."""
        assert self._rollouts_reader is not None
        while not stop.is_set():
            batches = await self._rollouts_reader.getmany(timeout_ms=int(self.options.poll_timeout * 1000), max_records=5000)
            now = time.monotonic()
            learned = 0
            for records in batches.values():
                for record in records:
                    try:
                        self.decisions.learn(decode(record.value, RolloutSnapshot), now)
                        learned += 1
                    except RecordError:
                        self.counts["invalid_snapshots"] += 1  # the rollouts sink dead-letters it
            if learned and self._awaiting:
                async with self._emit_lock:
                    await self._emit_decided(now)

    def _prune_decisions(self, now: float) -> None:
        if now - self._last_prune >= 60.0:
            self._last_prune = now
            self.counts["rollouts_forgotten"] += self.decisions.prune(now)

    async def _emit_decided(self, now: float) -> None:
        """Emit the awaiting attempts the state machine decided on (callers hold ``_emit_lock``)."""
        for key, (item, since) in list(self._awaiting.items()):
            if key not in self._awaiting:
                continue  # moved to another group member while an earlier one was being emitted
            trajectory = item.trajectory
            decision = self.decisions.decide(trajectory.rollout_id, trajectory.attempt_id, trajectory.attempt_sequence_id)
            if decision is None:
                if now - since < self.options.decision_seconds:
                    continue
                logger.warning("triplets: no decision on attempt %s of %s from the state machine within %.0fs; "
                               "emitted as undecided (never trained)", trajectory.attempt_id, trajectory.rollout_id,
                               self.options.decision_seconds)  # fmt: skip
                decision = UNDECIDED
                self._remember_undecided(key, trajectory, now)
            del self._awaiting[key]
            await self._emit(item, decision)
        await self._emit_late_decisions(now)

    def _remember_undecided(self, key: AttemptKey, trajectory: Trajectory, now: float) -> None:
        """Keep an undecided trajectory (without its spans: the triplets are all it weighs) for ``late_window_seconds``,
        at most :data:`MAX_UNDECIDED_HELD`, oldest dropped first."""
        self._undecided[key] = (trajectory, now)
        while len(self._undecided) > MAX_UNDECIDED_HELD:
            del self._undecided[next(iter(self._undecided))]
            self.counts["undecided_forgotten"] += 1

    async def _emit_late_decisions(self, now: float) -> None:
        """A decision that came after the wait ran out: an undecided trajectory the state machine then decided
        ``final`` is published again as ``final`` (the learner trains it; the triplets table keeps the later row).

        Seed 303 at 20,000 rollouts: ten rollouts' ``succeeded`` snapshots reached ``agl.rollouts`` eight minutes
        late, their trajectories left undecided after 300 s, and the learner never trained them."""
        for key, (trajectory, since) in list(self._undecided.items()):
            decision = self.decisions.decide(trajectory.rollout_id, trajectory.attempt_id, trajectory.attempt_sequence_id)
            if decision is None:
                if now - since > self.options.late_window_seconds:
                    del self._undecided[key]
                    self.counts["undecided_forgotten"] += 1
                continue
            del self._undecided[key]
            if decision.decision != "final":
                continue  # superseded: never trained either way
            assert self._producer is not None
            late = trajectory.model_copy(update={"decision": decision.decision, "rollout_status": decision.rollout_status})
            logger.warning("triplets: the state machine decided attempt %s of %s after %.0fs; published again as final",
                           trajectory.attempt_id, trajectory.rollout_id, now - since)  # fmt: skip
            future = await self._producer.send(self.triplets_topic, late, key=late.rollout_id)
            self._settle(future, [], "trajectories_final_late")

    # ------------------------------------------------------------------ input

    async def _on_assignment(self, consumer: RecordConsumer) -> None:
        """After a rebalance: drop what moved away, learn which attempts were adapted before (see module doc)."""
        if not consumer.assignment_changed.is_set():
            return
        consumer.assignment_changed.clear()
        check_co_partitioned(consumer.raw.assignment(), self.spans_topic, self.attempts_topic)
        owned = {tp.partition for tp in consumer.raw.assignment()}
        # aiokafka's rebalances are eager: every partition was revoked, and the new assignment's uncommitted
        # records are all delivered again from the committed offsets, a partition this member keeps included.
        # So this member starts over on all of them, as a new owner (or a restart) does: nothing buffered,
        # awaiting or remembered survives (a remembered attempt would take its redelivered 'finished' for a
        # handled repeat and commit it before its trajectory exists), and the restore below runs for every
        # partition. In-flight trajectories may be published twice; their consumers dedupe.
        self._spans_progress.keep(set())  # positions went back to the committed offsets
        self._attempts_progress.keep(set())
        dropped = len(self.buffer.drop_partitions(())) + len(self._awaiting)
        self._awaiting.clear()
        self._deferred = []  # their records belong to the ended tenure (the tracker forgot them)
        if dropped:
            logger.info("triplets: %d buffered attempts start over after a rebalance", dropped)
        if owned:
            restored = await self._restore_adapted(consumer, sorted(owned))
            self.counts["restored_adapted"] += restored
            if restored:
                logger.info("triplets: %d attempts adapted before the rebalance may have spans replayed", restored)

    async def _restore_adapted(self, consumer: RecordConsumer, partitions: list[int]) -> int:
        """Mark attempts whose ``finished`` is committed but whose spans may be redelivered as adapted."""
        reader = AIOKafkaConsumer(**connection_options(self.settings), group_id=None, enable_auto_commit=False)
        await start_with_retry(reader, "triplets restore reader", 30.0)
        restored, now = 0, time.monotonic()
        try:
            for partition in partitions:
                spans_tp = TopicPartition(self.spans_topic, partition)
                attempts_tp = TopicPartition(self.attempts_topic, partition)
                committed_attempts = await consumer.raw.committed(attempts_tp)
                if not committed_attempts:
                    continue  # no committed finished event: everything replays whole
                replay_from = await consumer.raw.committed(spans_tp) or 0
                first_replayed = await _first_record(reader, spans_tp, replay_from)
                if first_replayed is None:
                    continue  # no span replays
                since = max(0, first_replayed.timestamp - int(self.options.restore_skew_seconds * 1000))
                found = await reader.offsets_for_times({attempts_tp: since})
                start = found[attempts_tp].offset if found.get(attempts_tp) is not None else committed_attempts
                for record in await read_range(reader, attempts_tp, start, committed_attempts):
                    if dict(record.headers or ()).get(CONTROL_HEADER) is not None:
                        continue
                    try:
                        event = decode(record.value, AttemptEvent)
                    except RecordError:
                        continue  # dead-lettered when it was first consumed
                    if event.kind == "finished":
                        self.buffer.restore_adapted(event.rollout_id, event.attempt_id, now, partition)
                        restored += 1
        finally:
            await reader.stop()
        return restored

    async def _commit_transaction(self, begin_next: bool = True) -> dict[TopicPartition, int]:
        """Commit the open transaction with the offsets its trajectories cover, then open the next one.

        Under the emit lock, so no trajectory joins the transaction between the flush and the commit.
        A failure is fatal: the process restarts and its uncommitted input is redelivered."""
        assert self._consumer is not None and self._producer is not None
        async with self._emit_lock:
            await self._producer.flush(timeout=self._producer.delivery_timeout)
            await asyncio.sleep(0)  # the settle callbacks of the last acknowledgements run before the offsets are read
            if self._fatal is not None:
                raise RuntimeError(f"triplets: a trajectory could not be produced: {self._fatal!r}") from self._fatal
            offsets = self._consumer.committable()
            await self._producer.commit_transaction(offsets, self._group_id)
            self._consumer.committed_elsewhere(offsets)
            self.counts["transactions"] += 1
            if begin_next:
                await self._producer.begin_transaction()
        return offsets

    def _release_deferred(self, consumer: RecordConsumer) -> None:
        """Spans of attempts whose ``finished`` record is now committed become committable."""
        keep: list[tuple[list[ConsumerRecord], list[RecordRef]]] = []
        for finished_records, span_records in self._deferred:
            if all(consumer.is_committed(r) for r in finished_records):
                consumer.done_many(span_records)
            elif all(consumer.owns(r) for r in finished_records):
                keep.append((finished_records, span_records))
        self._deferred = keep

    async def _ingest(self, record: ConsumerRecord, now: float) -> None:
        assert self._consumer is not None and self._dlq is not None
        if record.topic == self.spans_topic:
            await self._ingest_span(record, now)
            return
        self._attempts_progress.consumed(record.partition, record.timestamp / 1000.0 if record.timestamp is not None else None)
        if dict(record.headers or ()).get(CONTROL_HEADER) is not None:
            self._consumer.done(record)  # rollout control records (cancel) are the state machine's business
            return
        try:
            event = decode(record.value, AttemptEvent)
        except RecordError as err:
            self.counts["invalid_attempt_events"] += 1
            await self._dead_letter(err.reason, [record], record=record, kind="invalid_record")
            return
        if event.kind == "finished":
            produced_at = record.timestamp / 1000.0 if record.timestamp is not None else time.time()
            if not self.buffer.add_finished(event, record, record.partition, now, produced_at):
                self.counts["duplicate_finished"] += 1
                if self.buffer.was_adapted(event.rollout_id, event.attempt_id):
                    # its attempt is adapted; otherwise the repeat is buffered and settled with the trajectory
                    self._consumer.done(record)
            else:
                self.counts["attempts_finished"] += 1
                first_span = self.buffer.abandoned_from(event.rollout_id, event.attempt_id)
                if first_span is not None:
                    await self._recover_abandoned(event, record.partition, first_span)
        else:
            produced_at = record.timestamp / 1000.0 if record.timestamp is not None else None
            if event.kind == "started":
                self.buffer.add_started(event, record.partition, now, produced_at)
            else:  # a heartbeat: the runner is alive, so its attempt is not an orphan however long it takes
                self.buffer.note_alive(event.rollout_id, event.attempt_id, now, produced_at)
            self._consumer.done(record)

    async def _ingest_span(self, record: ConsumerRecord, now: float) -> None:
        assert self._consumer is not None
        produced_at = record.timestamp / 1000.0 if record.timestamp is not None else None
        self._spans_progress.consumed(record.partition, produced_at)
        try:
            span = decode(record.value, Span)
        except RecordError as err:
            self.counts["invalid_spans"] += 1
            await self._dead_letter(err.reason, [record], record=record, kind="invalid_record")
            return
        outcome = self.buffer.add_span(span, record, record.partition, now, produced_at)
        if outcome is SpanOutcome.REPLAYED:
            self.counts["replayed_spans"] += 1
            self._consumer.done(record)
        elif outcome is SpanOutcome.LATE:
            self.counts["late_spans"] += 1
            reason = f"late span: attempt {span.attempt_id} of rollout {span.rollout_id} was already adapted"
            await self._dead_letter(reason, [record], record=record, kind="late_span", error_type="LateSpan")
        elif outcome is SpanOutcome.DUPLICATE:
            self.counts["duplicate_spans"] += 1
        else:
            self.counts["spans"] += 1

    # ------------------------------------------------------------------ output

    def _trajectory(
        self, item: PendingAttempt, triplets: list[Triplet], spans: Sequence[Span], decision: Decision
    ) -> Trajectory:
        finished = item.finished
        assert finished is not None
        meta = item.metadata()
        versions = sorted({t.policy_version for t in triplets if t.policy_version is not None})
        expected = item.expected_spans
        extra: dict[str, Any] = {"policy_versions": versions, "worker_id": finished.worker_id}
        if not item.complete:
            extra.update(incomplete=True, expected_spans=expected, received_spans=len(spans))
        if finished.error:
            extra["error"] = finished.error
        reward, dimensions = final_reward(spans)
        if len(dimensions) > 1:  # task success and a shaped reward's parts, for the accuracy queries
            extra["reward_dimensions"] = dimensions
        group_id = meta.get("group_id")
        return Trajectory(
            rollout_id=item.rollout_id,
            attempt_id=item.attempt_id,
            attempt_sequence_id=finished.attempt_sequence_id,
            group_id=str(group_id) if group_id is not None else None,
            mode=finished.mode or (item.started.mode if item.started else None),
            resources_id=finished.resources_id or (item.started.resources_id if item.started else None),
            status=finished.status or "unknown",
            final_reward=reward,
            triplets=triplets,
            adapter=repr(self.adapter),
            span_count=len(spans),
            finished_at=finished.timestamp,
            metadata={**extra, "rollout_metadata": meta},
            decision=decision.decision,
            rollout_status=decision.rollout_status,
        )

    async def _adapt(self, item: PendingAttempt) -> Optional[Adapted]:
        """Adapt a ready attempt now, so that only its trajectory waits for the decision, not its spans.

        The spans (decoded, and the records' bytes) are what an attempt weighs; waiting for the state
        machine holds a hundred attempts or more when it lags, so they are let go here. An adapter
        failure is dead-lettered at once, with the attempt's records."""
        spans = sorted(item.spans.values(), key=span_order_key)
        if not item.complete:
            self.counts["incomplete_attempts"] += 1
            logger.warning(
                "triplets: attempt %s of %s adapted with %d of %s spans after the %.0fs grace period",
                item.attempt_id, item.rollout_id, len(spans), item.expected_spans, self.options.grace_seconds,
            )  # fmt: skip
        try:
            triplets = self.adapter.adapt(spans)
            if not all(isinstance(t, Triplet) for t in triplets):
                raise TypeError(f"{self.adapter!r} returned {type(triplets[0]).__name__}, not Triplet")
            trajectory = self._trajectory(item, triplets, spans, UNDECIDED)
        except Exception as exc:  # bad spans for this adapter
            self.counts["adapter_errors"] += 1
            logger.exception("triplets: attempt %s of %s could not be adapted", item.attempt_id, item.rollout_id)
            finished_record = next((t for t in reversed(item.tokens) if t.topic == self.attempts_topic), None)
            await self._dead_letter(
                f"attempt {item.attempt_id} of rollout {item.rollout_id} could not be adapted: {exc!r}",
                item.tokens,
                record=finished_record,
                kind="adapter_error",
                error_type=type(exc).__name__,
            )
            return None
        finished = [t for t in item.tokens if t.topic == self.attempts_topic]  # small; a dead letter keeps one
        span_records = [RecordRef.of(t) for t in item.tokens if t.topic != self.attempts_topic]
        return Adapted(trajectory, item.partition, finished, span_records)

    async def _emit(self, item: Adapted, decision: Decision) -> None:
        assert self._producer is not None
        trajectory = item.trajectory.model_copy(update={"decision": decision.decision, "rollout_status": decision.rollout_status})
        try:
            future = await self._producer.send(self.triplets_topic, trajectory, key=trajectory.rollout_id)
        except Exception as exc:  # a trajectory over the broker's record limit
            self.counts["adapter_errors"] += 1
            logger.exception("triplets: the trajectory of attempt %s of %s could not be sent", trajectory.attempt_id,
                             trajectory.rollout_id)  # fmt: skip
            await self._dead_letter(
                f"the trajectory of attempt {trajectory.attempt_id} of rollout {trajectory.rollout_id} could not be "
                f"sent: {exc!r}",
                [*item.finished, *item.spans],
                record=item.finished[-1] if item.finished else None,
                kind="adapter_error",
                error_type=type(exc).__name__,
            )
            return
        self.counts[f"trajectories_{decision.decision}"] += 1
        self._settle(future, list(item.finished), "trajectories", then_defer=item.spans)

    async def _abandon(self, item: PendingAttempt) -> None:
        """Dead-letter the spans of an attempt that never reported 'finished' (each with its bytes).

        Remembered (like adapted attempts, for ``late_window_seconds``): a runner cut off from the brokers, or whose
        partition leader was down, goes silent and then reports everything at once, 'finished' included; its spans
        are then read again from the topic (:meth:`_recover_abandoned`), not adapted from those that came after.
        """
        self.counts["abandoned_attempts"] += 1
        offsets = [t.offset for t in item.tokens if isinstance(t, ConsumerRecord) and t.topic == self.spans_topic]
        self.buffer.remember_abandoned(item, min(offsets) if offsets else None, time.monotonic())
        reason = (
            f"abandoned attempt: no 'finished' event for attempt {item.attempt_id} of rollout {item.rollout_id} "
            f"within {self.options.orphan_seconds:.0f}s"
        )
        for token in item.tokens:
            await self._dead_letter(reason, [token], record=token, kind="abandoned_attempt", error_type="Abandoned")

    async def _recover_abandoned(self, finished: AttemptEvent, partition: int, first_span: int) -> None:
        """An abandoned attempt reported 'finished' after all: read its spans again, from its first one up to the
        consumer's position (what comes after arrives as usual). Its earlier dead letters stay, as a record of the
        silence. If they cannot be read, the attempt is adapted from the spans that came after, and that is logged."""
        assert self._consumer is not None
        tp = TopicPartition(self.spans_topic, partition)
        rid, aid = finished.rollout_id, finished.attempt_id
        if tp not in self._consumer.raw.assignment():
            return  # moved away meanwhile: its new owner replays the attempt whole
        stop = await self._consumer.raw.position(tp)
        reader = AIOKafkaConsumer(**connection_options(self.settings), group_id=None, enable_auto_commit=False,
                                  isolation_level="read_committed" if self.settings.kafka_transactions else "read_uncommitted")  # fmt: skip
        try:
            await start_with_retry(reader, "triplets abandoned-spans reader", 30.0)
            records = await read_range(reader, tp, first_span, stop)
        except Exception:
            self.counts["abandoned_unrecovered"] += 1
            logger.exception("triplets: could not read the spans of abandoned attempt %s of %s again", aid, rid)
            return
        finally:
            await reader.stop()
        spans = []
        for record in records:
            try:
                span = decode(record.value, Span)
            except RecordError:
                continue  # dead-lettered when it was first consumed
            if span.rollout_id == rid and span.attempt_id == aid:
                spans.append(span)
        recovered = self.buffer.recover_spans(rid, aid, spans)
        self.counts["abandoned_recovered"] += 1
        self.counts["recovered_spans"] += recovered
        logger.warning("triplets: abandoned attempt %s of %s reported 'finished' after all; %d of its spans read again "
                       "(offsets %d-%d of %s)", aid, rid, recovered, first_span, stop - 1, tp)  # fmt: skip

    async def _dead_letter(
        self,
        reason: str,
        tokens: list[Any],
        *,
        record: Optional[ConsumerRecord],
        kind: str,
        error_type: str = "RecordError",
    ) -> None:
        assert self._dlq is not None
        future = await self._dlq.send(reason, record=record, kind=kind, error_type=error_type)
        self._settle(future, tokens, "dead_letters_acked")

    def _settle(
        self, future: "asyncio.Future[Any]", tokens: list[Any], counter: str, then_defer: Sequence[Any] = ()
    ) -> None:
        """Mark the source records done when the output is acknowledged; a failed delivery is fatal.

        ``then_defer``: records that become done only once ``tokens`` are committed (an attempt's spans).
        """
        self._in_flight += 1

        def on_done(fut: "asyncio.Future[Any]") -> None:
            self._in_flight -= 1
            if fut.cancelled() or fut.exception() is not None:
                error = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
                logger.error("triplets: delivery failed; stopping without committing: %r", error)
                self._fatal = self._fatal or error
                return
            self.counts[counter] += 1
            if self._consumer is not None:
                self._consumer.done_many(tokens)
                if then_defer:
                    self._deferred.append((list(tokens), list(then_defer)))

        future.add_done_callback(on_done)


def triplets_consumer(settings: Settings, group_id: str, *, max_poll_records: int) -> RecordConsumer:
    """The group consumer of ``agl.spans`` and ``agl.attempts``, co-partitioned (see the module's docstring)."""
    return RecordConsumer(
        settings, [settings.topic("spans"), settings.topic("attempts")], group_id, max_poll_records=max_poll_records,
        latency_critical=True,  # an attempt's 'finished' -> its trajectory
        partition_assignment_strategy=(RangePartitionAssignor,),
    )  # fmt: skip


def check_co_partitioned(assignment: Any, spans_topic: str, attempts_topic: str) -> None:
    """Raise unless this member holds the same partitions of both topics (else attempts lose their spans)."""
    spans = {tp.partition for tp in assignment if tp.topic == spans_topic}
    attempts = {tp.partition for tp in assignment if tp.topic == attempts_topic}
    if spans != attempts:
        raise RuntimeError(
            f"triplets: assigned {spans_topic} partitions {sorted(spans)} but {attempts_topic} partitions "
            f"{sorted(attempts)}: the two topics must have the same partition count, and every member of the group "
            "the range assignor (a member of an older version in the group?)"
        )


async def _first_record(reader: Any, tp: Any, offset: int, timeout: float = 120.0) -> Optional[ConsumerRecord]:
    """The record at ``offset`` of ``tp`` (or the next one), ``None`` at the end of the partition.

    The end is the fetch responses' high watermark (Tansu's ListOffsets end offsets can be too low). The
    wait is as long as :func:`~agl_stream_processors.topic_range.read_range`'s: a partition whose leader is paused or cut off answers only
    once another replica leads it (a 30 s wait ended the whole service in a nemesis run).
    """
    reader.assign([tp])
    reader.seek(tp, offset)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = await reader.getmany(tp, timeout_ms=300, max_records=1)
        if batch.get(tp):
            return batch[tp][0]
        if await read_to_fetched_end(reader, tp):
            return None
    raise TimeoutError(f"could not read {tp.topic}[{tp.partition}] at offset {offset} within {timeout:.0f}s")
