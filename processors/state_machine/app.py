"""The rollout state machine as a faust app: one agent over ``agl.tasks`` and ``agl.attempts``; spans
(liveness only) arrive beside faust through :class:`~.liveness.SpanLivenessReader`.

State lives in a faust Table (in memory, restored from a compacted changelog topic that ``run``
pre-creates with ``agl_stream_topics.admin.ensure_topics`` and the rollout partition count; faust itself never
declares topics). The three input topics are co-partitioned but not ordered with each other: a span
or ``started`` event may be processed before its task; the rules merge whatever comes first. Each change publishes a
:class:`~agl_stream.types.RolloutSnapshot` to the compacted ``agl.rollouts`` keyed by rollout_id.

Ordering of effects per change, so a crash at any point loses nothing:
1. a requeue task is written to ``agl.tasks`` and *acknowledged* first (its attempt id is
   derived from rollout id + attempt number, so doing it twice yields the same attempt);
2. the snapshot is sent, then the table (changelog) is updated; faust flushes the producer before
   it commits source offsets, and after every rebalance the recovered states of recently changed
   rollouts are re-published, so ``agl.rollouts`` converges even if the process died in between.

The watchdog is a faust timer. faust only lets a table be written from inside stream iteration
when it picks the changelog partition from the current event; this table uses the producer's
partitioner instead (``use_partitioner=True``: same murmur2 partitioner and partition count as the
source topics, so the changelog stays co-partitioned) and can be written from the timer.

Spans are the bulk of the input: the liveness reader reads only their ids, and a span of an attempt
already ``running`` only refreshes an in-memory "last seen" time (no decode of the state, no
changelog write, no lock); a span that changes the state is applied under the agent's lock. After a restart those
times are gone, so every watched attempt gets a fresh ``unresponsive_seconds`` window from the
recovery time (never a false "unresponsive").

Bounded memory: terminal rollouts are dropped from the table ``retention_seconds`` after they
ended, or earlier, oldest first, once more than ``max_terminal_held`` are held (their last
snapshot stays on the compacted topic); states created by runner events whose
task never arrived are dropped after the same idle time. Snapshots are only published for
rollouts whose task was seen, so a very late event about a dropped rollout cannot overwrite its
final snapshot.

Recovery on the Tansu fallback broker (only there: :func:`~agl_stream.kafka.is_tansu`): Tansu reports end
offsets too low when a partition's last batch holds several records, so faust's changelog recovery can
stop early; after faust's recovery the assigned changelog partitions are read to the high watermark of
the fetch responses and whatever faust missed is applied (``recovery_corrections`` in health). Tansu
also answers a waiting fetch only when its wait runs out, so there faust's 1.5 s fetch wait is
shortened. On Apache Kafka neither runs: faust's recovery and fetches are used as they are.

On a multi-instance rebalance faust drops restored keys of revoked partitions but not keys written
live (memory store). After every rebalance those lingering keys are left out of the indexes: the
watchdog acts on the indexed keys (two instances watching one rollout would requeue its attempt
twice), and only owned rollouts' snapshots are re-published.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from aiokafka.errors import IllegalStateError
from aiokafka.partitioner import DefaultPartitioner

from agl_stream.config import Settings
from agl_stream.kafka import LOW_LATENCY_FETCH_WAIT_MS, DeadLetterWriter, hop_fetch_wait_ms, is_tansu
from agl_stream.serialization import RecordError, decode, decode_envelope, encode
from agl_stream.types import AttemptEvent, AttemptedRollout, RolloutControl
from agl_stream_processors.state_machine import rules
from agl_stream_processors.state_machine.catchup import read_to_end
from agl_stream_processors.state_machine.decoded import DecodedStates
from agl_stream_processors.state_machine.gaps import GapReader, RecordEvent
from agl_stream_processors.state_machine.liveness import SpanLivenessReader
from agl_stream_processors.state_machine.recovery_gate import recovery_behind
from agl_stream.client.store_client import CONTROL_HEADER
from agl_stream_processors.state_machine.faust_config import app_options
from agl_stream_processors.state_machine.revisions import revision_of, revision_table
from agl_stream_processors.state_machine.rules import Outcome, RolloutState
from agl_stream_processors.read_progress import ReadProgress
from agl_stream_topics.catalog import CATALOG, TopicSpec

logger = logging.getLogger(__name__)

CHANGELOG = TopicSpec(
    "state-machine-changelog",
    "rollout_id",
    RolloutState,
    "compact",
    None,
    "the rollout state machine's table (faust changelog); co-partitioned with the rollout topics",
)


# agl-stream's encoder writes a span's ids first; anything else falls back to a full JSON parse
#: how often a span held during a rebalance looks again (rebalances take seconds)
REBALANCE_POLL_S = 0.05

_SPAN_IDS = re.compile(rb'^\{"schema":"span","v":1,"data":\{"rollout_id":"([^"\\]+)","attempt_id":"([^"\\]+)"')


def _rounded(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else round(seconds, 3)


def _span_ids(value: Optional[bytes]) -> tuple[str, str]:
    """(rollout_id, attempt_id) of a span record without decoding the whole span (spans are the bulk)."""
    match = _SPAN_IDS.match(value[:256]) if value else None
    if match is not None:
        return match.group(1).decode(), match.group(2).decode()
    schema, _version, data = decode_envelope(value)
    if schema != "span" or not isinstance(data, dict):
        raise TypeError(f"not a span record (schema {schema!r})")
    rid, aid = data["rollout_id"], data["attempt_id"]
    if not isinstance(rid, str) or not isinstance(aid, str):
        raise TypeError("span ids must be strings")
    return rid, aid


@dataclass(frozen=True)
class StateMachineOptions:
    scan_interval: float = 1.0
    retention_seconds: float = 600.0
    # At most this many terminal rollouts held at once, the oldest dropped first: memory stays flat
    # whatever the rate (600 s at 40 rollouts/s would otherwise hold 24,000).
    max_terminal_held: int = 5000
    republish_window: float = 60.0
    group_id: Optional[str] = None  # default: "<topic prefix>-state-machine"
    # faust's processing guarantee: "exactly_once" writes the snapshots, requeued tasks and table changes of
    # each input partition in a transaction with its offsets (AGL_KAFKA_TRANSACTIONS turns it on; evaluated
    # in docs/architecture.md, "Exactly once"). Default: at-least-once with idempotent consumers.
    processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"


class RolloutStateMachine:
    """A named app of ``agl-stream processors``: ``run(stop)`` and ``health()``."""

    name = "state-machine"

    def __init__(self, settings: Settings, options: StateMachineOptions = StateMachineOptions()) -> None:
        self.settings = settings
        self.options = options
        self.app_id = options.group_id or f"{settings.topic_prefix}-state-machine"
        self.counts: Counter[str] = Counter()
        self.ready = asyncio.Event()  # set after the first table recovery
        self.dlq = DeadLetterWriter(settings.topic("dlq"), None, processor=self.name)
        self._lock = asyncio.Lock()
        self._watch: set[str] = set()
        self._running: dict[str, str] = {}  # rollout id -> attempt id of a running attempt (span fast path)
        self._last_seen: dict[str, float] = {}
        # how far the agent read agl.tasks/agl.attempts; with the span reader's, the watchdog's clock
        self._progress = ReadProgress()
        self._processed_to: dict[tuple[str, int], int] = {}  # (topic, partition) -> next offset the agent has not processed
        self._replay_floor: dict[tuple[str, int], int] = {}  # (topic, partition) -> first offset a replay may apply
        self._expiry: list[tuple[float, str]] = []
        self._terminal: dict[str, None] = {}  # terminal rollouts held, oldest first (insertion order)
        self._decoded = DecodedStates()  # states of the table's values this process wrote (saves decoding)
        self._recovered_at = 0.0
        self._app: Any = None
        self._changelog_known = False
        self._tansu = False  # the broker is the Tansu fallback: its workarounds run (set by run())
        self._hop_fetch_wait_ms = LOW_LATENCY_FETCH_WAIT_MS  # the stream consumer's fetch wait on Tansu (set by run())
        self._spans: Optional[SpanLivenessReader] = None
        self._gaps: Optional[GapReader] = None  # reads input records faust's stream skipped (started by run())
        self._background: set[asyncio.Task[None]] = set()
        self._reassert: set[bytes] = set()  # keys whose stale changelog records a replay skipped: publish again

    # ------------------------------------------------------------------ faust wiring

    def build_app(self) -> Any:
        import faust

        s = self.settings
        options = {**app_options(s), "processing_guarantee": self.options.processing_guarantee}
        Path(options["datadir"]).mkdir(parents=True, exist_ok=True)
        app = faust.App(self.app_id, **options)
        raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
        source = app.topic(s.topic("tasks"), s.topic("attempts"), **raw)  # spans: the liveness reader
        changelog = app.topic(CHANGELOG.name(s), partitions=s.partitions, compacting=True, internal=False, **raw)
        table_class = revision_table(self._stale_records_skipped)
        self._table = app.tables.add(table_class(
            app, name="rollouts", default=None, beacon=app.tables.beacon, partitions=s.partitions,
            changelog_topic=changelog, use_partitioner=True, key_type=bytes, value_type=bytes,
        ))  # fmt: skip
        self._tasks = app.topic(s.topic("tasks"), **raw)
        self._rollouts = app.topic(s.topic("rollouts"), **raw)
        self._dlq_topic = app.topic(s.topic("dlq"), **raw)
        app.agent(source, name=f"{self.app_id}.agent")(self._agent)
        app.timer(self.options.scan_interval, name=f"{self.app_id}.watchdog")(self._watchdog)
        self._table.on_recover(self._on_recover)
        self._app = app
        return app

    def _stale_records_skipped(self, keys: list[bytes]) -> None:
        """The changelog replay skipped stale states of ``keys`` (a zombie's late writes; see revisions.py)."""
        self.counts["stale_changelog_records"] += len(keys)
        self._reassert.update(keys)

    async def run(self, stop: asyncio.Event) -> None:
        from agl_stream_topics.admin import ensure_topics

        await ensure_topics(self.settings, specs=[*CATALOG, CHANGELOG], strict=True)
        self._tansu = await is_tansu(self.settings)
        self._hop_fetch_wait_ms = await hop_fetch_wait_ms(self.settings)
        app = self.build_app()
        self._spans = SpanLivenessReader(self.settings, f"{self.app_id}-spans", self._span_seen)
        await self._spans.start()
        self._gaps = GapReader(self.settings, read_committed=self.options.processing_guarantee == "exactly_once")
        await self._gaps.start()
        await app.start()
        logger.info("state machine %s started", self.app_id)
        reader = asyncio.create_task(self._spans.run(stop), name=f"{self.app_id}.spans")
        try:
            while not stop.is_set():
                if app.should_stop or getattr(app, "crash_reason", None) is not None:
                    raise RuntimeError(f"state machine crashed: {app.crash_reason!r}")
                try:
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
                except asyncio.TimeoutError:
                    pass
                if reader.done():
                    reader.result()  # the reader only returns when asked to stop: this raises its error
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            for task in list(self._background):
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            await app.stop()
            await self._spans.stop()
            await self._gaps.stop()

    def input_lag_seconds(self, now: float) -> Optional[float]:
        """How far behind its inputs (tasks and attempts through faust, spans through the reader) this app reads;
        None while a partition was neither fetched nor read since the last rebalance."""
        lags = [self._progress.lag_seconds(now), self._spans.progress.lag_seconds(now) if self._spans else 0.0]
        return None if None in lags else max(lag for lag in lags if lag is not None)

    async def _note_fetches(self) -> None:
        """Where faust's consumer stands on each input partition (see :mod:`~agl_stream_processors.read_progress`).

        faust buffers what its consumer fetched before the agent processes it, so a partition is caught up
        only when the agent processed up to the consumer's position too (one offset of slack: the marker
        that ends a transaction takes an offset the agent never sees).
        """
        consumer = self._app.consumer
        try:
            raw = consumer._thread._ensure_consumer()  # noqa: SLF001 - faust keeps no public accessor
        except AttributeError:
            return
        source = {self.settings.topic(t) for t in ("tasks", "attempts")}
        assigned = {tp for tp in consumer.assignment() if tp.topic in source}
        self._progress.keep({(tp.topic, tp.partition) for tp in assigned})
        for tp in assigned:
            key = (tp.topic, tp.partition)
            try:
                position: Optional[int] = await consumer.position(tp)
            except Exception:  # noqa: BLE001 - moved away meanwhile, or no position yet: unknown, not caught up
                position = None
            processed = self._processed_to.get(key)
            if position is not None and processed is not None and processed + 1 < position:
                position = processed  # fetched, not yet processed
            try:
                polled = raw.last_poll_timestamp(tp)
                highwater = consumer.highwater(tp)
            except (AssertionError, IllegalStateError):  # revoked while position() was awaited: aiokafka asserts
                continue  # the partition is no longer this app's (nemesis seed 303: the watchdog crashed here)
            self._progress.fetched(key, position, highwater, polled / 1000.0 if polled is not None else None)

    def health(self) -> dict[str, Any]:
        return {
            **dict(self.counts),
            "dead_letters": dict(self.dlq.counts),
            "rollouts_in_table": len(self._table) if self._app is not None else 0,
            "watched": len(self._watch),
            "input_lag_seconds": _rounded(self.input_lag_seconds(time.time())),
            "ready": self.ready.is_set(),
            "source": self._source_health(),
        }

    def _source_health(self) -> dict[str, Any]:
        """faust's view of the input partitions (flow and pauses), to tell a stalled consumer from an idle one."""
        consumer = getattr(self._app, "consumer", None) if self._app is not None else None
        if consumer is None:
            return {}
        try:
            source = {self.settings.topic(t) for t in ("tasks", "attempts")}
            assigned = [tp for tp in consumer.assignment() if tp.topic in source]
            active = consumer._get_active_partitions()  # noqa: SLF001 - faust keeps no public accessor
            positions: dict[str, Any] = {}
            raw = consumer._thread._ensure_consumer()  # noqa: SLF001 - the aiokafka consumer under faust
            for tp in sorted(assigned):
                state = raw._fetcher._subscriptions.subscription.assignment.state_value(tp)  # noqa: SLF001
                positions[f"{tp.topic}:{tp.partition}"] = [
                    getattr(state, "position", None) if state is not None else None,
                    raw.highwater(tp),
                    consumer._read_offset.get(tp),  # noqa: SLF001
                ]
            return {
                "flow_active": bool(consumer.flow_active),
                "assigned": len(assigned),
                "fetching": sum(1 for tp in assigned if tp in active),
                "position_highwater_read": positions,
            }
        except Exception as exc:  # diagnostics only; never fail the health report
            return {"error": repr(exc)}

    # ------------------------------------------------------------------ state access

    def _load(self, rollout_id: str) -> Optional[RolloutState]:
        key = rollout_id.encode()
        return self._decoded.load(key, self._table.get(key))

    def _index(self, state: RolloutState, now: float) -> None:
        rid = state.rollout_id
        if rules.watched(state):
            self._watch.add(rid)
        else:
            self._watch.discard(rid)
            self._last_seen.pop(rid, None)
        attempt = state.attempt
        if attempt is not None and attempt.status == "running" and not state.terminal:
            self._running[rid] = attempt.attempt_id
        else:
            self._running.pop(rid, None)
        expire_at = self._expire_at(state)
        if expire_at is not None:
            heapq.heappush(self._expiry, (expire_at, rid))
        if state.terminal:
            self._terminal.setdefault(rid, None)
        else:
            self._terminal.pop(rid, None)

    def _expire_at(self, state: RolloutState) -> Optional[float]:
        if state.terminal:
            return (state.rollout.end_time or state.updated_at) + self.options.retention_seconds
        if not state.has_task:
            return state.updated_at + self.options.retention_seconds
        return None

    def _forget(self, rollout_id: str) -> None:
        self._watch.discard(rollout_id)
        self._running.pop(rollout_id, None)
        self._last_seen.pop(rollout_id, None)
        self._terminal.pop(rollout_id, None)

    async def _apply(self, outcome: Outcome) -> None:
        """Send what the outcome says and store its state; its note is counted once that is done (whoever reads
        the counts, a health report or a test, then finds the state stored)."""
        if outcome.state is None:
            if outcome.note:
                self.counts[outcome.note] += 1
            return
        state = outcome.state
        key = state.rollout_id.encode()
        if outcome.requeue is not None:
            await self._send_acked(self._tasks, key, encode(outcome.requeue))
            self.counts["requeued"] += 1
        if state.has_task:
            if outcome.closed_attempt is not None:
                closed = state.snapshot().model_copy(
                    update={"attempt": outcome.closed_attempt, "attempts": outcome.closed_attempt.sequence_id}
                )
                await self._rollouts.send(key=key, value=encode(closed))
            await self._rollouts.send(key=key, value=encode(state.snapshot()))
            self.counts["snapshots"] += 1
        stored = self._load(state.rollout_id)
        state = state.model_copy(update={"revision": (stored.revision if stored is not None else 0) + 1})
        raw = state.model_dump_json().encode()
        await self._changelog_metadata()
        self._table[key] = raw
        self._decoded.remember(key, raw, state)
        self._index(state, state.updated_at)
        if outcome.note:
            self.counts[outcome.note] += 1

    async def _changelog_metadata(self) -> None:
        """Make sure faust's producer knows the changelog's partitions before a table write.

        A table write picks the changelog partition synchronously from the producer's metadata, and
        faust never asks for it: against Apache Kafka, which answers a client's bootstrap with no topic
        metadata, the first write would fail. ``partitions_for`` waits for that metadata (once)."""
        if self._changelog_known or self._app is None:  # no app: a table without a changelog (unit tests)
            return
        producer = self._app.producer._ensure_producer()  # noqa: SLF001 - faust keeps no public accessor
        await producer.partitions_for(CHANGELOG.name(self.settings))
        self._changelog_known = True

    @staticmethod
    async def _send_acked(topic: Any, key: bytes, value: bytes) -> None:
        fut = await topic.send(key=key, value=value)
        await fut

    # ------------------------------------------------------------------ the agent

    async def _agent(self, stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            async with self._lock:
                where = (message.topic, message.partition)
                if message.offset < self._replay_floor.get(where, 0):
                    self.counts["replay_floor_skipped"] += 1  # older than the table's memory: see _replay_start
                    continue
                expected = self._processed_to.get(where)
                if expected is not None and message.offset > expected:
                    await self._fill_gap(message.topic, message.partition, expected, message.offset)
                await self._process(event)

    async def _process(self, event: Any) -> None:
        """Apply one input record (under the lock); a record that fails is dead-lettered, never fatal."""
        message = event.message
        self._progress.consumed((message.topic, message.partition), message.timestamp)
        self._processed_to[(message.topic, message.partition)] = message.offset + 1
        try:
            await self._handle(event)
        except Exception as exc:  # never let one record stop the agent
            self.counts["processing_errors"] += 1
            logger.exception("state machine: record %s[%s@%s] failed", message.topic, message.partition, message.offset)
            try:
                reason = f"processing failed: {exc!r}"
                await self._dead_letter(event, reason, type(exc).__name__, "processing_error")
            except Exception:
                self.counts["dead_letter_errors"] += 1
                logger.exception("state machine: could not dead-letter %s[%s@%s]", message.topic, message.partition,
                                 message.offset)  # fmt: skip

    async def _fill_gap(self, topic: str, partition: int, start: int, end: int) -> None:
        """Apply the records ``start..end-1`` that faust's stream skipped (see :mod:`.gaps`), read from the topic."""
        if self._gaps is None:  # no reader (unit tests drive the agent without a broker)
            return
        try:
            records = await self._gaps.read(topic, partition, start, end)
        except Exception:  # the broker unreachable for the whole timeout: say so loudly, go on with what arrived
            self.counts["input_gaps_unread"] += 1
            logger.exception("state machine: could not read %s[%s] offsets %d-%d that the stream skipped",
                             topic, partition, start, end - 1)  # fmt: skip
            return
        self.counts["input_gaps"] += 1
        if records:
            self.counts["input_gap_records"] += len(records)
            logger.warning("state machine: the stream skipped %d records of %s[%s] (offsets %d-%d); read them from "
                           "the topic and applied them in order", len(records), topic, partition, start, end - 1)  # fmt: skip
        for record in records:
            await self._process(RecordEvent(record))

    async def _handle(self, event: Any) -> None:
        message = event.message
        topic, value, now = message.topic, message.value, time.time()
        if topic == self.settings.topic("tasks"):
            try:
                task = decode(value, AttemptedRollout)
            except RecordError as err:
                await self._dead_letter(event, err.reason, "RecordError", "invalid_record")
                return
            await self._apply(rules.on_task(self._load(task.rollout_id), task, now))
            return
        headers = {k: v for k, v in (event.headers or {}).items()}
        if headers.get(CONTROL_HEADER) is not None:
            try:
                control = decode(value, RolloutControl)
            except RecordError as err:
                await self._dead_letter(event, err.reason, "RecordError", "invalid_record")
                return
            await self._apply(rules.on_cancel(self._load(control.rollout_id), control, now))
            return
        try:
            attempt_event = decode(value, AttemptEvent)
        except RecordError as err:
            await self._dead_letter(event, err.reason, "RecordError", "invalid_record")
            return
        rid = attempt_event.rollout_id
        if attempt_event.kind == "heartbeat" and self._running.get(rid) == attempt_event.attempt_id:
            self._last_seen[rid] = now
            return
        await self._apply(rules.on_attempt_event(self._load(rid), attempt_event, now))
        if attempt_event.kind == "heartbeat":
            # A heartbeat keeps the current attempt alive whether or not a span has made it "running" yet: an
            # agent that records its spans at the end (a controller's command) is "preparing" until then.
            state = self._load(rid)
            if state is not None and state.attempt is not None and state.attempt.attempt_id == attempt_event.attempt_id:
                self._last_seen[rid] = now

    async def _span_seen(self, value: Optional[bytes], now: float) -> None:
        """A span from the liveness reader: a running attempt's heartbeat, or a change to apply.

        The heartbeat needs no lock (no await between the check and the write). A change is computed
        *under* the lock from the state as it is then: the faust agent may have changed the rollout
        while this waited (a task processed meanwhile must not be overwritten by a stale copy).
        """
        try:
            rid, aid = _span_ids(value)
        except (RecordError, KeyError, TypeError):
            # spans are dead-lettered by their owners (triplet processor, span sink); here they only count as liveness
            self.counts["unreadable_spans"] += 1
            return
        self.counts["spans"] += 1
        if self._running.get(rid) == aid:
            self._last_seen[rid] = now
            return
        if await self._while_rebalancing() and not self._owns(rid):
            self.counts["spans_of_revoked_partitions"] += 1  # its new owner watches the attempt now
            return
        async with self._lock:
            if self._running.get(rid) == aid:  # another span of this attempt started it while this waited
                self._last_seen[rid] = now
                return
            await self._apply(rules.on_activity(self._load(rid), aid, now, rollout_id=rid))

    async def _while_rebalancing(self) -> bool:
        """Hold a span's state change until faust's rebalance (its table recovery included) has ended.

        Until then the table may be partly read (see :mod:`.recovery_gate`): a span of an attempt whose state
        is not read yet would create a state without its task, which the recovered state then loses to. The
        span reader stalls meanwhile (only it: its consumer is assigned by hand, nothing times out), and a
        stop still ends it (its task is cancelled). True: it held (the partition may have moved since)."""
        held = False
        while self._app is not None and self._app.rebalancing:
            if not held:
                held = True
                self.counts["spans_held_in_rebalance"] += 1
            await asyncio.sleep(REBALANCE_POLL_S)
        return held

    def _owns(self, rollout_id: str) -> bool:
        owned = self._owned_partitions()
        return owned is None or self._partition_of(rollout_id.encode()) in owned

    async def _dead_letter(self, event: Any, reason: str, error_type: str, kind: str) -> None:
        message = event.message
        letter = self.dlq.letter(reason, source_topic=message.topic, payload=message.value, key=message.key,
                                 error_type=error_type, kind=kind)  # fmt: skip
        letter = letter.model_copy(update={"partition": message.partition, "offset": message.offset})
        await self._dlq_topic.send(key=message.key, value=encode(letter))

    # ------------------------------------------------------------------ recovery and watchdog

    def _shorten_fetch_wait(self) -> None:
        """faust builds its stream consumer with a fixed ``fetch_max_wait_ms=1500``; on the local Tansu broker
        that is about 340 ms per hop for every event (see ``LOW_LATENCY_FETCH_WAIT_MS``). The aiokafka
        fetcher reads the value for each fetch request, so setting it once the consumer exists applies it.
        On Apache Kafka faust's wait costs no latency (a waiting fetch is answered when a record arrives)."""
        wait = self._hop_fetch_wait_ms
        try:
            raw = self._app.consumer._thread._ensure_consumer()  # noqa: SLF001 - faust keeps no public accessor
            fetcher = getattr(raw, "_fetcher", None)
            raw._fetch_max_wait_ms = wait  # noqa: SLF001 - for a fetcher made later
            if fetcher is not None:
                fetcher._fetch_max_wait_ms = wait  # noqa: SLF001
        except AttributeError as exc:  # a faust/aiokafka upgrade moved them: slower, still correct
            logger.warning("state machine: could not shorten faust's fetch wait (%r); events wait up to 1.5 s", exc)

    async def _on_recover(self) -> None:
        """After every rebalance: rebuild the indexes from the table, re-publish recent snapshots.

        Only once faust's recovery has really read every owned changelog partition (see
        :mod:`.recovery_gate`): faust may call this for a recovery that a newer rebalance interrupted, and
        calls it again when that one ends."""
        behind = recovery_behind(self._app, CHANGELOG.name(self.settings))
        if behind:
            self.counts["premature_recoveries"] += 1
            logger.warning("state machine: faust reported its recovery complete with changelog partitions %s not "
                           "read yet (a rebalance interrupted it); waiting for the recovery that follows",
                           [tp.partition for tp in behind])  # fmt: skip
            return
        if self._tansu or self.settings.kafka_hop_fetch_wait_ms is not None:
            self._shorten_fetch_wait()
        assert self._spans is not None
        await self._spans.assign(tp.partition for tp in self._app.consumer.assignment()
                                 if tp.topic == self.settings.topic("attempts"))  # fmt: skip
        now = time.time()
        async with self._lock:
            self._progress, self._processed_to = ReadProgress(), {}  # partitions may have moved: measured again
            self._replay_floor = {}
            await self._rewind_uncommitted()
            corrected = await self._catch_up() if self._tansu else 0
            self._watch.clear()
            self._running.clear()
            self._last_seen.clear()
            self._expiry.clear()
            self._decoded.clear()
            republished = lingering = 0
            owned = self._owned_partitions()
            for key, raw in list(self._table.items()):
                if not raw:
                    continue
                if owned is not None and self._partition_of(key) not in owned:
                    # a revoked partition's key that faust kept (written live): its owner watches and publishes it
                    # now. Acting on it here too would requeue the same attempt twice, and re-publishing it could
                    # put a stale snapshot over the owner's. It stays in faust's store (removing it there would
                    # lose it if the partition came back: faust would not restore what it thinks it holds).
                    lingering += 1
                    continue
                state = RolloutState.model_validate_json(raw)
                self._decoded.remember(key, raw, state)
                self._index(state, now)
                if rules.watched(state):
                    self._last_seen[state.rollout_id] = now  # a fresh unresponsive window after a restart
                if key in self._reassert:
                    # a zombie's stale snapshot may sit on top (newer updated_at): assert the state as of now
                    await self._rollouts.send(key=key, value=encode(state.snapshot().model_copy(update={"updated_at": now})))
                    republished += 1
                    self.counts["reasserted_snapshots"] += 1
                elif state.has_task and (not state.terminal or now - state.updated_at <= self.options.republish_window):
                    await self._rollouts.send(key=key, value=encode(state.snapshot()))
                    republished += 1
            self._recovered_at = now
            self._reassert.clear()
        if lingering:
            self.counts["revoked_keys_ignored"] += lingering
        logger.info(
            "state machine: %d rollouts recovered (%d corrected from the changelog tail, %d of revoked partitions "
            "ignored), %d snapshots re-published", len(self._table), corrected, lingering, republished,
        )  # fmt: skip
        self.ready.set()

    def _owned_partitions(self) -> Optional[set[int]]:
        """Partition numbers of the rollout-keyed inputs assigned to this instance (None: unknown)."""
        tasks = self.settings.topic("tasks")
        owned = {tp.partition for tp in self._app.consumer.assignment() if tp.topic == tasks}
        return owned if self._app.consumer.topic_partitions(tasks) else None

    def _partition_of(self, key: bytes) -> int:
        """The partition of a rollout id on the co-partitioned topics (the producers' default partitioner)."""
        count = self._app.consumer.topic_partitions(self.settings.topic("tasks")) or self.settings.partitions
        partitions = list(range(count))
        return DefaultPartitioner()(key, partitions, partitions)

    async def _rewind_uncommitted(self) -> None:
        """Replay input partitions that have no committed offset, once faust's streams are flowing.

        faust's consumer fetches while the table recovers and drops what it fetched; its seek to the
        committed offsets afterwards skips partitions without a commit (aiokafka seeks only committed
        ones), so records of such a partition fetched during recovery were never processed: after a
        restart, its events since the previous run started (every 'finished' event, say) were lost to
        the state machine and rollouts stayed 'queuing'/'running'. Seeking them back (see
        :meth:`_replay_start` for where to) after the rebalance ended replays them; the rules ignore
        whatever the table already reflects.
        """
        consumer = self._app.consumer
        source = {self.settings.topic(t) for t in ("tasks", "attempts")}
        committed = await consumer.seek_to_committed()  # faust's only way to read them; it seeks again itself
        rewind: dict[Any, int] = {}
        for tp, offset in committed.items():  # where the agent starts: what faust fetches beyond it is unprocessed
            if tp.topic not in source:
                continue
            if offset is None or offset < 0:
                rewind[tp] = await self._replay_start(tp.topic, tp.partition)
                self._processed_to[(tp.topic, tp.partition)] = self._replay_floor[(tp.topic, tp.partition)] = rewind[tp]
            else:
                self._processed_to[(tp.topic, tp.partition)] = offset
        if rewind:
            task = asyncio.create_task(self._rewind_when_flowing(rewind), name=f"{self.app_id}.rewind")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _replay_start(self, topic: str, partition: int) -> int:
        """Where to replay an input partition without a committed offset from: never before the table's memory.

        The table forgets a rollout ``retention_seconds`` after it ended. Replaying that rollout's task
        would file it again as ``queuing``, and a runner would run a long-finished rollout once more (seed
        202 at 20,000 rollouts: 2,529 of them, after a coordinator move made the group's offsets read as
        missing). So the replay starts at the first record produced within ``retention_seconds`` before the
        table's last change in this partition (its changelog's last record): everything older was either
        applied and is still in the table, or belongs to a rollout the table has forgotten on purpose. A
        partition whose changelog is empty (a first start) replays from the beginning. If the broker
        cannot say, the replay starts at the beginning (nothing lost; old rollouts may come back).
        """
        if self._gaps is None:
            return 0
        try:
            last_change = await self._gaps.last_record_time(CHANGELOG.name(self.settings), partition)
            if last_change is None:
                return 0
            start = await self._gaps.offset_at(topic, partition, last_change - self.options.retention_seconds)
        except Exception:
            self.counts["replay_horizon_errors"] += 1
            logger.exception("state machine: could not find where to replay %s[%s] from; replaying it all",
                             topic, partition)  # fmt: skip
            return 0
        if start > 0:
            self.counts["replay_horizon_skipped"] += start
        return start

    async def _rewind_when_flowing(self, rewind: dict[Any, int], timeout: float = 120.0) -> None:
        app, consumer = self._app, self._app.consumer
        deadline = time.monotonic() + timeout
        while app.rebalancing or app.in_recovery or not consumer.flow_active:
            if time.monotonic() > deadline:
                logger.error("state machine: streams did not resume within %.0fs; %d partitions not rewound",
                             timeout, len(rewind))  # fmt: skip
                return
            await asyncio.sleep(0.1)
        if set(rewind) - set(consumer.assignment()):
            return  # another rebalance moved them; its recovery decides again
        await consumer.seek_wait(rewind)  # in faust's consumer thread, which owns the aiokafka client
        for tp in rewind:
            consumer._read_offset[tp] = None  # noqa: SLF001 - else faust drops records below its read offset
        self.counts["rewound_partitions"] += len(rewind)
        logger.info("state machine: %d input partitions without a committed offset replayed (from offsets %s)",
                    len(rewind), sorted(rewind.values()))  # fmt: skip

    async def _catch_up(self) -> int:
        """Apply changelog records faust's recovery missed (see :mod:`agl_stream_processors.state_machine.catchup`)."""
        partitions = sorted({tp.partition for tp in self._app.consumer.assignment()})
        latest = await read_to_end(self.settings, CHANGELOG.name(self.settings), partitions)
        corrected = 0
        for key, value in latest.items():
            current = self._table.data.get(key)
            if value is None:
                if current is not None:
                    del self._table.data[key]
                    corrected += 1
            elif current != value and (revision_of(value) or 0) >= (revision_of(current) or 0):
                self._table.data[key] = value  # the store directly: no new changelog record
                corrected += 1
        if corrected:
            self.counts["recovery_corrections"] += corrected
        return corrected

    async def _watchdog(self) -> None:
        if not self.ready.is_set() or self._app.rebalancing or self._app.in_recovery:
            return  # mid-rebalance the partitions (and the rollouts this instance may judge) are in flux
        now = time.time()
        async with self._lock:
            # Silence is judged by read progress, not the wall clock: while the inputs lag (a restart, a pause),
            # the spans and heartbeats that keep an attempt alive are still unread (see read_progress).
            await self._note_fetches()
            read_through = min(self._progress.read_through(now), self._spans.progress.read_through(now) if self._spans else now)
            for rid in list(self._watch):
                try:
                    state = self._load(rid)
                    if state is None or not rules.watched(state):
                        self._watch.discard(rid)
                        continue
                    await self._apply(rules.watchdog(state, read_through, self._last_seen.get(rid)))
                except Exception:
                    self.counts["watchdog_errors"] += 1
                    logger.exception("state machine: watchdog failed for %s", rid)
            while self._expiry and self._expiry[0][0] <= now:
                _, rid = heapq.heappop(self._expiry)
                state = self._load(rid)
                if state is None:
                    continue
                expire_at = self._expire_at(state)
                if expire_at is None or expire_at > now:
                    continue  # changed since it was scheduled; its newer schedule is in the heap
                if not state.terminal and now - self._last_seen.get(rid, 0.0) < self.options.retention_seconds:
                    heapq.heappush(self._expiry, (now + self.options.retention_seconds, rid))
                    continue
                await self._drop(rid)
                self.counts["expired"] += 1
            while len(self._terminal) > self.options.max_terminal_held:
                await self._drop(next(iter(self._terminal)))
                self.counts["expired_over_cap"] += 1

    async def _drop(self, rid: str) -> None:
        """Remove a rollout's state from the table (its last snapshot stays on the compacted topic)."""
        await self._changelog_metadata()
        self._table.pop(rid.encode(), None)
        self._decoded.forget(rid.encode())
        self._forget(rid)
