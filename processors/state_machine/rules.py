"""Upstream's rollout/attempt status rules as pure functions: (state, input, now) -> outcome.

Attempt: ``preparing`` when a runner takes the task (``started``), ``running`` on the first span,
``succeeded``/``failed`` from the runner's ``finished`` event, ``timeout`` (now - start >
``timeout_seconds``) or ``unresponsive`` (now - last heartbeat or span > ``unresponsive_seconds``)
from the watchdog; a span or heartbeat revives ``unresponsive`` back to ``running``.

Rollout: follows its latest attempt. A failed/timeout/unresponsive attempt requeues the rollout
(``requeuing``, a new attempt with ``sequence_id + 1`` written to ``agl.tasks``) iff its status is in
``retry_condition`` and ``sequence_id < max_attempts``; otherwise the rollout is ``failed``.
``succeeded``, ``failed`` and ``cancelled`` are terminal (a rollout failed because its last attempt
went unresponsive is revived if that attempt shows signs of life, as upstream).

Late and duplicate input never corrupts state: events of an older attempt, a repeated
``finished``, a task echoing an attempt already known, anything after a terminal status, are
ignored and reported in ``Outcome.note`` (the processor counts them).

An attempt is *superseded* once the rollout has a later attempt (a requeue creates it at once,
with its deterministic id). Its late spans, heartbeats and ``finished`` (a runner that stalled or
lost the broker and came back) change nothing here: notes ``superseded_activity`` and
``superseded_event``. Its trajectory is still adapted, marked ``superseded`` and never trained.

Times are the state machine's own clock (``now``), like upstream's store, so runner clock skew
cannot trigger timeouts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.types import (
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptEvent,
    AttemptStatus,
    Rollout,
    RolloutControl,
    RolloutSnapshot,
)

RETRYABLE: frozenset[str] = frozenset({"failed", "timeout", "unresponsive"})
FINAL_ATTEMPT_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "timeout"})


class RolloutState(BaseModel):
    """What the state machine keeps per rollout (the value of its table, JSON in the changelog)."""

    model_config = ConfigDict(extra="ignore")
    rollout: Rollout
    attempt: Optional[Attempt] = Field(default=None, description="the latest attempt")
    attempts: int = 0
    started: bool = Field(default=False, description="the latest attempt was taken by a runner")
    has_task: bool = Field(default=False, description="its agl.tasks record was seen (config known)")
    failed_unresponsive: bool = Field(default=False, description="failed because the attempt went silent")
    updated_at: float = 0.0
    # last field (revisions.REVISION_FIELD): one more with every stored update, so a changelog replay keeps
    # the most advanced state of a rollout, not a stale one a paused instance wrote late (see revisions.py)
    revision: int = 0

    @property
    def rollout_id(self) -> str:
        return self.rollout.rollout_id

    @property
    def terminal(self) -> bool:
        return self.rollout.status in TERMINAL_ROLLOUT_STATUSES

    def snapshot(self) -> RolloutSnapshot:
        return RolloutSnapshot(
            rollout=self.rollout, attempt=self.attempt, attempts=self.attempts, updated_at=self.updated_at
        )


@dataclass
class Outcome:
    """Result of applying one input: the new state when it changed, a task to requeue, and a note."""

    state: Optional[RolloutState] = None
    requeue: Optional[AttemptedRollout] = None
    note: Optional[str] = None
    closed_attempt: Optional[Attempt] = None  # the attempt a requeue replaced, with its final status

    @property
    def changed(self) -> bool:
        return self.state is not None


def ignored(note: str) -> Outcome:
    return Outcome(note=note)


def retry_attempt_id(rollout_id: str, sequence_id: int) -> str:
    """Deterministic id of a retry attempt, so reprocessing the same failure cannot create two attempts."""
    return "at-" + hashlib.sha256(f"{rollout_id}/{sequence_id}".encode()).hexdigest()[:8]


def _copy(state: RolloutState, now: float) -> RolloutState:
    """A copy safe to modify: the rules only assign fields of the state, its rollout and its attempt
    (never mutate input/config/metadata in place), so shallow copies of those three suffice."""
    return state.model_copy(
        update={
            "rollout": state.rollout.model_copy(),
            "attempt": state.attempt.model_copy() if state.attempt is not None else None,
            "updated_at": now,
        }
    )


# ---------------------------------------------------------------------- tasks (agl.tasks)


def on_task(state: Optional[RolloutState], task: AttemptedRollout, now: float) -> Outcome:
    attempt = task.attempt
    rollout = Rollout.model_validate(task.model_dump(exclude={"attempt"}))
    if rollout.status not in ("queuing", "requeuing"):
        rollout.status = "queuing"
    if state is None:
        fresh = RolloutState(
            rollout=rollout,
            attempt=attempt.model_copy(update={"status": "preparing"}),
            attempts=attempt.sequence_id,
            has_task=True,
            updated_at=now,
        )
        return Outcome(state=fresh)
    if not state.has_task:
        # The runner's events (or a cancel) overtook the task across topics: keep the progress, learn the config.
        new = _copy(state, now)
        new.has_task = True
        progressed = new.rollout.status
        new.rollout = rollout.model_copy(
            update={"status": progressed, "end_time": state.rollout.end_time, "start_time": rollout.start_time}
        )
        if new.attempt is not None and new.attempt.attempt_id == attempt.attempt_id:
            new.attempt.sequence_id = attempt.sequence_id  # the task knows the attempt number; spans do not
            new.attempts = max(new.attempts, attempt.sequence_id)
        elif new.attempt is None or attempt.sequence_id > new.attempts:
            new.attempt = attempt.model_copy(update={"status": "preparing"})
            new.attempts = attempt.sequence_id
            new.started = False
            if not new.terminal:
                new.rollout.status = rollout.status
        return Outcome(state=new)
    if state.attempt is not None and attempt.attempt_id == state.attempt.attempt_id:
        return ignored("duplicate_task")
    if state.terminal:
        return ignored("late_task")
    if attempt.sequence_id <= state.attempts:
        return ignored("stale_task")
    # Someone outside the state machine requeued the rollout with a later attempt: adopt it.
    new = _copy(state, now)
    new.attempt = attempt.model_copy(update={"status": "preparing"})
    new.attempts = attempt.sequence_id
    new.started = False
    new.rollout.status = rollout.status
    return Outcome(state=new)


# ---------------------------------------------------------------------- runner events (agl.attempts)


def _is_current(state: RolloutState, attempt_id: str) -> bool:
    return state.attempt is not None and state.attempt.attempt_id == attempt_id


def _stale_note(state: RolloutState, event: AttemptEvent) -> str:
    """Why an event of an attempt that is not the current one is ignored."""
    if event.attempt_sequence_id <= state.attempts:
        return "superseded_event"
    return "late_event"


def _adopt_newer(state: RolloutState, event: AttemptEvent, now: float) -> Optional[RolloutState]:
    """An event of an attempt later than the one we know (its task was not seen yet): make it current."""
    if event.attempt_sequence_id <= state.attempts or state.terminal:
        return None
    new = _copy(state, now)
    new.attempt = Attempt(
        rollout_id=state.rollout_id,
        attempt_id=event.attempt_id,
        sequence_id=event.attempt_sequence_id,
        start_time=now,
        worker_id=event.worker_id,
        last_heartbeat_time=now,
    )
    new.attempts = event.attempt_sequence_id
    new.started = False
    return new


def on_attempt_event(state: Optional[RolloutState], event: AttemptEvent, now: float) -> Outcome:
    if event.kind == "started":
        return _on_started(state, event, now)
    if event.kind == "heartbeat":
        return on_activity(state, event.attempt_id, now, is_span=False)
    return _on_finished(state, event, now)


def _on_started(state: Optional[RolloutState], event: AttemptEvent, now: float) -> Outcome:
    if state is None:
        rollout = Rollout(
            rollout_id=event.rollout_id,
            mode=event.mode,
            resources_id=event.resources_id,
            status="preparing",
            start_time=now,
            metadata=dict(event.metadata),
        )
        attempt = Attempt(
            rollout_id=event.rollout_id,
            attempt_id=event.attempt_id,
            sequence_id=event.attempt_sequence_id,
            start_time=now,
            worker_id=event.worker_id,
            last_heartbeat_time=now,
        )
        fresh = RolloutState(
            rollout=rollout, attempt=attempt, attempts=attempt.sequence_id, started=True, updated_at=now
        )
        return Outcome(state=fresh)
    if state.terminal:
        return ignored("late_event")
    new: Optional[RolloutState]
    if _is_current(state, event.attempt_id):
        assert state.attempt is not None
        if state.started:
            if state.attempt.worker_id is None and event.worker_id is not None:  # a span made it start first
                new = _copy(state, now)
                assert new.attempt is not None
                new.attempt.worker_id = event.worker_id
                return Outcome(state=new)
            return ignored("duplicate_started")
        new = _copy(state, now)
    else:
        new = _adopt_newer(state, event, now)
        if new is None:
            return ignored(_stale_note(state, event))
    assert new.attempt is not None
    new.started = True
    new.attempt.worker_id = event.worker_id or new.attempt.worker_id
    if new.attempt.status == "preparing":  # a span may have made it running already
        new.attempt.start_time = now
        new.rollout.status = "preparing"
    new.attempt.last_heartbeat_time = max(now, new.attempt.last_heartbeat_time or 0.0)
    return Outcome(state=new)


def on_activity(
    state: Optional[RolloutState],
    attempt_id: str,
    now: float,
    *,
    is_span: bool = True,
    rollout_id: Optional[str] = None,
) -> Outcome:
    """A span or heartbeat of an attempt: the first span -> running; either revives unresponsive.

    Plain liveness (no status change) returns no new state: the caller tracks heartbeat times in
    memory so a span storm does not become a changelog storm. A span can overtake its task and
    'started' event (different topics): with ``rollout_id`` given it then creates the state, which
    the task completes when it arrives.
    """
    if state is None:
        if not is_span or rollout_id is None:
            return ignored("unknown_rollout")
        rollout = Rollout(rollout_id=rollout_id, status="running", start_time=now)
        attempt = Attempt(
            rollout_id=rollout_id, attempt_id=attempt_id, start_time=now, status="running", last_heartbeat_time=now
        )
        fresh = RolloutState(rollout=rollout, attempt=attempt, attempts=1, started=True, updated_at=now)
        return Outcome(state=fresh, note="span_before_task")
    if not _is_current(state, attempt_id):
        return ignored("superseded_activity")
    assert state.attempt is not None
    revivable = state.attempt.status == "unresponsive" and (not state.terminal or state.failed_unresponsive)
    if state.terminal and not revivable:
        return ignored("late_event")
    if (is_span and state.attempt.status == "preparing") or revivable:
        new = _copy(state, now)
        assert new.attempt is not None
        if not new.started:
            new.started = True
            new.attempt.start_time = now
        new.attempt.status = "running"
        new.attempt.last_heartbeat_time = now
        new.rollout.status = "running"
        new.rollout.end_time = None
        new.failed_unresponsive = False
        return Outcome(state=new, note="revived" if revivable else None)
    return Outcome()


def _on_finished(state: Optional[RolloutState], event: AttemptEvent, now: float) -> Outcome:
    if state is None:
        return ignored("unknown_rollout")
    new: Optional[RolloutState]
    if _is_current(state, event.attempt_id):
        assert state.attempt is not None
        if state.attempt.status in FINAL_ATTEMPT_STATUSES:
            return ignored("duplicate_finished")
        if state.terminal and not state.failed_unresponsive:
            return ignored("late_event")
        new = _copy(state, now)
    else:
        new = _adopt_newer(state, event, now)
        if new is None:
            return ignored(_stale_note(state, event))
    status: AttemptStatus = event.status if event.status in ("succeeded", "failed") else "failed"
    return finish_attempt(new, status, now)


def finish_attempt(state: RolloutState, status: AttemptStatus, now: float) -> Outcome:
    """Set the latest attempt's outcome and propagate it to the rollout (requeue or terminal)."""
    assert state.attempt is not None
    state.attempt.status = status
    if status in FINAL_ATTEMPT_STATUSES:
        state.attempt.end_time = now
    state.updated_at = now
    state.failed_unresponsive = False
    if status == "succeeded":
        state.rollout.status = "succeeded"
        state.rollout.end_time = now
        return Outcome(state=state)
    config = state.rollout.config
    if status in config.retry_condition and state.attempt.sequence_id < config.max_attempts:
        sequence_id = state.attempt.sequence_id + 1
        retry = Attempt(
            rollout_id=state.rollout_id,
            attempt_id=retry_attempt_id(state.rollout_id, sequence_id),
            sequence_id=sequence_id,
            start_time=now,
        )
        closed = state.attempt.model_copy()
        state.rollout.status = "requeuing"
        state.attempt = retry
        state.attempts = sequence_id
        state.started = False
        task = AttemptedRollout(**state.rollout.model_dump(), attempt=retry)
        return Outcome(state=state, requeue=task, note=f"requeued_{status}", closed_attempt=closed)
    state.rollout.status = "failed"
    state.rollout.end_time = now
    state.failed_unresponsive = status == "unresponsive"
    return Outcome(state=state, note=f"failed_{status}")


# ---------------------------------------------------------------------- control and watchdog


def on_cancel(state: Optional[RolloutState], control: RolloutControl, now: float) -> Outcome:
    if state is None:
        # The cancel overtook the task: remember it so the task arriving later cannot start the rollout.
        rollout = Rollout(rollout_id=control.rollout_id, status="cancelled", start_time=now, end_time=now)
        return Outcome(state=RolloutState(rollout=rollout, updated_at=now), note="cancelled")
    if state.terminal and not state.failed_unresponsive:
        return ignored("late_cancel")
    new = _copy(state, now)
    new.rollout.status = "cancelled"
    new.rollout.end_time = now
    new.failed_unresponsive = False
    return Outcome(state=new, note="cancelled")


def watchdog(state: RolloutState, now: float, last_seen: Optional[float] = None) -> Outcome:
    """Timeout / unresponsive check of the latest attempt; ``last_seen`` is the latest span or heartbeat time."""
    attempt = state.attempt
    if state.terminal or attempt is None or not state.started:
        return Outcome()
    if attempt.status not in ("preparing", "running", "unresponsive"):
        return Outcome()
    config = state.rollout.config
    if config.timeout_seconds is not None and now - attempt.start_time > config.timeout_seconds:
        return finish_attempt(_copy(state, now), "timeout", now)
    if attempt.status == "unresponsive" or config.unresponsive_seconds is None:
        return Outcome()
    alive = max(attempt.last_heartbeat_time or attempt.start_time, last_seen or 0.0)
    if now - alive > config.unresponsive_seconds:
        new = _copy(state, now)
        assert new.attempt is not None
        new.attempt.last_heartbeat_time = alive
        return finish_attempt(new, "unresponsive", now)
    return Outcome()


def watched(state: RolloutState) -> bool:
    """Whether the watchdog needs to look at this rollout at all."""
    config = state.rollout.config
    return (
        not state.terminal
        and state.started
        and state.attempt is not None
        and (config.timeout_seconds is not None or config.unresponsive_seconds is not None)
    )
