"""Per-attempt span buffering: when is an attempt complete, what is late, what is abandoned.

Pure bookkeeping (no Kafka), driven by the processor with a monotonic clock:

* an attempt is **ready** once its ``finished`` event arrived and ``span_count`` distinct spans were
  received, or with whatever arrived once the spans were read up to ``grace_seconds`` after the
  ``finished`` event was produced (then it is marked incomplete; ``span_count`` missing also means
  "wait for the grace period"). The grace is judged by read progress, not the wall clock: a processor
  that lags (a restart, a pause) has the missing spans on the topic, unread
  (:mod:`agl_stream_processors.read_progress`);
* a span for an attempt that was already adapted (remembered for ``late_window_seconds``) is
  **late**: the processor counts it and dead-letters it with reason "late span" (no re-adaptation:
  the trajectory may already be trained on; the dead letter keeps the bytes for a replay);
* spans whose attempt goes silent are **abandoned** after ``orphan_seconds`` (the runner died; the
  state machine requeues the rollout as a new attempt) and dead-lettered, so memory stays bounded.
  Silent means no sign of life: no span and no attempt event (``started``, heartbeats) of the attempt.
  A slow attempt whose runner still heartbeats is alive: abandoning one at ``orphan_seconds`` after its
  first span dead-lettered the spans it had, and when its ``finished`` came it was adapted from the rest
  after the grace period (the nemesis, with a broker node killed mid-attempt: 11 of 23 spans).
  Silence too is judged by read progress, of ``agl.attempts``: ``orphan_seconds`` must have passed on
  the processor's clock *and* in what it read of the attempt events since the last sign of life was
  produced. A processor paused for longer than that (SIGSTOP, a long GC, a stalled partition) otherwise
  abandoned attempts whose ``finished`` event waited, unread, in its fetch buffer: their trajectories
  left with no spans (the nemesis lost the triplets of final attempts this way).

What the buffer remembers about adapted attempts is per partition, and a partition that moves away
takes it along (:meth:`AttemptBuffer.drop_partitions`): its uncommitted records are redelivered to the
new owner, and if the partition comes back, to this one again, which must then treat them as a new
owner does (the restore on assignment), not as late repeats of an attempt it adapted but maybe never
emitted. Remembering across the move lost trajectories under the nemesis: the redelivered ``finished``
event was taken as a handled duplicate, the spans dead-lettered as late and committed, and a later
owner adapted the rest after the grace period (partial trajectories) or nothing at all.

Each buffered item carries an opaque token (the Kafka record) handed back so the caller can mark
the source records done only once the trajectory (or dead letter) is acknowledged.
"""

from __future__ import annotations

import enum
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from agl_stream.types import AttemptEvent, Span

AttemptKey = tuple[str, str]


def _digest(rollout_id: str, attempt_id: str) -> bytes:
    """A 12-byte stand-in for an adapted attempt's ids: the remembered set holds one per attempt for an hour,
    and a bytes key costs about a third of a tuple of two strings (collisions: ~2**-96 per pair)."""
    return hashlib.blake2b(f"{rollout_id}\0{attempt_id}".encode(), digest_size=12).digest()


class SpanOutcome(enum.Enum):
    BUFFERED = "buffered"
    DUPLICATE = "duplicate"  # same span id already buffered (at-least-once redelivery)
    LATE = "late"  # the attempt was already adapted
    REPLAYED = "replayed"  # redelivered after a restart; its attempt was adapted before the restart


@dataclass
class PendingAttempt:
    rollout_id: str
    attempt_id: str
    partition: Optional[int]
    first_seen: float
    last_seen: float = 0.0  # processor clock: when its latest span or attempt event was read
    last_produced: Optional[float] = None  # epoch time its latest span or attempt event was produced
    spans: dict[str, Span] = field(default_factory=dict)
    tokens: list[Any] = field(default_factory=list)
    finished: Optional[AttemptEvent] = None
    finished_at: Optional[float] = None  # when the 'finished' event was produced (or seen, without a timestamp)
    started: Optional[AttemptEvent] = None

    @property
    def key(self) -> AttemptKey:
        return (self.rollout_id, self.attempt_id)

    def alive(self, now: float, produced_at: Optional[float]) -> None:
        self.last_seen = max(self.last_seen, now)
        if produced_at is not None:
            self.last_produced = produced_at if self.last_produced is None else max(self.last_produced, produced_at)

    @property
    def expected_spans(self) -> Optional[int]:
        return self.finished.span_count if self.finished is not None else None

    @property
    def complete(self) -> bool:
        expected = self.expected_spans
        return self.finished is not None and expected is not None and len(self.spans) >= expected

    def metadata(self) -> dict[str, Any]:
        """Rollout metadata the runner copied into the attempt events (finished wins over started)."""
        merged: dict[str, Any] = {}
        if self.started is not None:
            merged.update(self.started.metadata)
        if self.finished is not None:
            merged.update(self.finished.metadata)
        return merged


class AttemptBuffer:
    def __init__(
        self,
        *,
        grace_seconds: float = 30.0,
        orphan_seconds: float = 900.0,
        late_window_seconds: float = 3600.0,
        max_remembered: int = 200_000,
    ) -> None:
        self.grace_seconds = grace_seconds
        self.orphan_seconds = orphan_seconds
        self.late_window_seconds = late_window_seconds
        self.max_remembered = max_remembered
        self.pending: dict[AttemptKey, PendingAttempt] = {}
        # digest -> (when, partition), oldest first: attempts adapted here, and adapted before a restart
        self._adapted: OrderedDict[bytes, tuple[float, Optional[int]]] = OrderedDict()
        self._restored: OrderedDict[bytes, tuple[float, Optional[int]]] = OrderedDict()
        # attempts abandoned here (digest -> (when, partition)) and the offset of their first span read: a
        # 'finished' event that still comes (the runner was cut off, not dead) has their spans read again
        self._abandoned: OrderedDict[bytes, tuple[float, Optional[int]]] = OrderedDict()
        self._abandoned_from: dict[bytes, int] = {}

    # ------------------------------------------------------------------ input

    def _get(self, rollout_id: str, attempt_id: str, partition: Optional[int], now: float) -> PendingAttempt:
        key = (rollout_id, attempt_id)
        item = self.pending.get(key)
        if item is None:
            item = self.pending[key] = PendingAttempt(rollout_id, attempt_id, partition, now, last_seen=now)
        return item

    def was_adapted(self, rollout_id: str, attempt_id: str) -> bool:
        key = _digest(rollout_id, attempt_id)
        return key in self._adapted or key in self._restored

    def restore_adapted(self, rollout_id: str, attempt_id: str, now: float, partition: Optional[int] = None) -> None:
        """An attempt adapted before a restart (its ``finished`` event is committed): its spans may be redelivered."""
        key = _digest(rollout_id, attempt_id)
        self._restored[key] = (now, partition)
        self._restored.move_to_end(key)
        self._expire(self._restored, now)

    def add_span(self, span: Span, token: Any, partition: Optional[int], now: float,
                 produced_at: Optional[float] = None) -> SpanOutcome:  # fmt: skip
        """Buffer a span (its record produced at ``produced_at``, epoch seconds, when known)."""
        key = _digest(span.rollout_id, span.attempt_id)
        if key in self._restored:
            return SpanOutcome.REPLAYED
        if key in self._adapted:
            return SpanOutcome.LATE
        item = self._get(span.rollout_id, span.attempt_id, partition, now)
        item.alive(now, produced_at)
        item.tokens.append(token)
        if span.span_id in item.spans:
            return SpanOutcome.DUPLICATE
        item.spans[span.span_id] = span
        return SpanOutcome.BUFFERED

    def add_started(self, event: AttemptEvent, partition: Optional[int], now: float,
                    produced_at: Optional[float] = None) -> None:  # fmt: skip
        if not self.was_adapted(event.rollout_id, event.attempt_id):
            item = self._get(event.rollout_id, event.attempt_id, partition, now)
            item.started = event
            item.alive(now, produced_at)

    def note_alive(self, rollout_id: str, attempt_id: str, now: float, produced_at: Optional[float] = None) -> None:
        """A sign of life of an attempt (a heartbeat) whose spans are buffered: its orphan time starts again."""
        item = self.pending.get((rollout_id, attempt_id))
        if item is not None:
            item.alive(now, produced_at)

    def add_finished(
        self, event: AttemptEvent, token: Any, partition: Optional[int], now: float, produced_at: Optional[float] = None
    ) -> bool:
        """Record a ``finished`` event (produced at ``produced_at``, on the clock ``take_ready``'s ``read_through`` uses);
        False when it repeats one already seen or adapted (a duplicate)."""
        if self.was_adapted(event.rollout_id, event.attempt_id):
            return False
        item = self._get(event.rollout_id, event.attempt_id, partition, now)
        item.tokens.append(token)
        if item.finished is not None:
            return False
        item.finished, item.finished_at = event, produced_at if produced_at is not None else now
        return True

    # ------------------------------------------------------------------ output

    def take_ready(self, now: float, read_through: Optional[float] = None) -> list[PendingAttempt]:
        """Attempts to adapt now (complete, or past the grace period); they move to the adapted set.

        ``read_through``: the time before which every span was read (default ``now``); the grace period
        ends when it passes ``finished_at + grace_seconds``.
        """
        clock = now if read_through is None else read_through
        ready = [
            item
            for item in self.pending.values()
            if item.finished is not None
            and (item.complete or (item.finished_at is not None and clock - item.finished_at >= self.grace_seconds))
        ]
        for item in ready:
            del self.pending[item.key]
            self._adapted[_digest(*item.key)] = (now, item.partition)
            self._adapted.move_to_end(_digest(*item.key))
        self._expire(self._adapted, now)
        return ready

    def take_abandoned(self, now: float, attempts_read_through: Optional[float] = None) -> list[PendingAttempt]:
        """Attempts with spans but no ``finished`` event and no sign of life for ``orphan_seconds``, on the
        processor's clock (``now``) and in the attempt events read: ``attempts_read_through`` is the epoch time
        before which every attempt event was read (None: not known, the clock alone decides)."""

        def orphaned(item: PendingAttempt) -> bool:
            if item.finished is not None or now - item.last_seen < self.orphan_seconds:
                return False
            if attempts_read_through is None or item.last_produced is None:
                return True
            return attempts_read_through - item.last_produced >= self.orphan_seconds

        abandoned = [item for item in self.pending.values() if orphaned(item)]
        for item in abandoned:
            del self.pending[item.key]
        return abandoned

    def remember_abandoned(self, item: PendingAttempt, first_span_offset: Optional[int], now: float) -> None:
        """``item`` was abandoned; its spans start at ``first_span_offset`` of its partition (None: it had none)."""
        if first_span_offset is None:
            return
        key = _digest(*item.key)
        self._abandoned[key] = (now, item.partition)
        self._abandoned.move_to_end(key)
        earlier = self._abandoned_from.get(key)  # abandoned twice (silent again): its spans start at the first time
        self._abandoned_from[key] = first_span_offset if earlier is None else min(earlier, first_span_offset)
        self._expire(self._abandoned, now)
        for gone in self._abandoned_from.keys() - self._abandoned.keys():
            del self._abandoned_from[gone]

    def abandoned_from(self, rollout_id: str, attempt_id: str) -> Optional[int]:
        """The offset of the first span of an attempt abandoned here (None: not abandoned, or forgotten)."""
        return self._abandoned_from.get(_digest(rollout_id, attempt_id))

    def recover_spans(self, rollout_id: str, attempt_id: str, spans: Iterable[Span]) -> int:
        """Put an abandoned attempt's spans, read again, back with it (its 'finished' event came); how many were missing."""
        key = _digest(rollout_id, attempt_id)
        self._abandoned.pop(key, None)
        self._abandoned_from.pop(key, None)
        item = self.pending.get((rollout_id, attempt_id))
        if item is None:
            return 0
        added = 0
        for span in spans:
            if span.rollout_id == rollout_id and span.attempt_id == attempt_id and span.span_id not in item.spans:
                item.spans[span.span_id] = span
                added += 1
        return added

    def drop_partitions(self, keep: Iterable[int]) -> list[PendingAttempt]:
        """Forget attempts of partitions this consumer no longer owns (their records are redelivered), and what
        it remembers about their adapted attempts (see the module's docstring)."""
        owned = set(keep)
        dropped = [item for item in self.pending.values() if item.partition is not None and item.partition not in owned]
        for item in dropped:
            del self.pending[item.key]
        for remembered in (self._adapted, self._restored, self._abandoned):
            for key in [k for k, (_, partition) in remembered.items() if partition is not None and partition not in owned]:
                del remembered[key]
                self._abandoned_from.pop(key, None)
        return dropped

    def _expire(self, remembered: "OrderedDict[bytes, tuple[float, Optional[int]]]", now: float) -> None:
        horizon = now - self.late_window_seconds
        while remembered:
            when, _ = next(iter(remembered.values()))
            if when >= horizon and len(remembered) <= self.max_remembered:
                break
            remembered.popitem(last=False)

    # ------------------------------------------------------------------ sizes (health)

    @property
    def buffered_spans(self) -> int:
        return sum(len(item.spans) for item in self.pending.values())

    @property
    def remembered(self) -> int:
        return len(self._adapted)
