"""Upstream's status rules, input by input (pure: no broker, explicit clock)."""

from __future__ import annotations

from typing import Optional

from agl_stream.types import Attempt, AttemptedRollout, AttemptEvent, RolloutConfig, RolloutControl
from agl_stream_processors.state_machine import rules
from agl_stream_processors.state_machine.rules import RolloutState

R = "ro-000000000001"


def task(config: Optional[RolloutConfig] = None, attempt_id: str = "at-00000001", seq: int = 1) -> AttemptedRollout:
    return AttemptedRollout(
        rollout_id=R,
        input={"q": 1},
        mode="train",
        config=config or RolloutConfig(),
        metadata={"group_id": "g"},
        attempt=Attempt(rollout_id=R, attempt_id=attempt_id, sequence_id=seq),
    )


def event(kind: str, attempt_id: str = "at-00000001", seq: int = 1, status: Optional[str] = None) -> AttemptEvent:
    return AttemptEvent(kind=kind, rollout_id=R, attempt_id=attempt_id, attempt_sequence_id=seq, status=status, worker_id="w")  # type: ignore[arg-type]


def apply(state: Optional[RolloutState], outcome: rules.Outcome) -> Optional[RolloutState]:
    return outcome.state if outcome.changed else state


def running(config: RolloutConfig, now: float = 0.0) -> RolloutState:
    state = rules.on_task(None, task(config), now).state
    state = apply(state, rules.on_attempt_event(state, event("started"), now + 1))
    state = apply(state, rules.on_activity(state, "at-00000001", now + 2))
    assert state is not None
    return state


def test_happy_path_statuses() -> None:
    state = rules.on_task(None, task(), 0.0).state
    assert state is not None and (state.rollout.status, state.attempt.status) == ("queuing", "preparing")  # type: ignore[union-attr]
    state = apply(state, rules.on_attempt_event(state, event("started"), 1.0))
    assert (state.rollout.status, state.attempt.status, state.attempt.start_time) == ("preparing", "preparing", 1.0)  # type: ignore[union-attr]
    # a heartbeat is liveness only: no state change, no move to running
    assert not rules.on_attempt_event(state, event("heartbeat"), 1.5).changed
    state = apply(state, rules.on_activity(state, "at-00000001", 2.0))
    assert (state.rollout.status, state.attempt.status) == ("running", "running")  # type: ignore[union-attr]
    assert not rules.on_activity(state, "at-00000001", 2.5).changed  # further spans: heartbeats only
    state = apply(state, rules.on_attempt_event(state, event("finished", status="succeeded"), 3.0))
    assert (state.rollout.status, state.rollout.end_time, state.attempt.status) == ("succeeded", 3.0, "succeeded")  # type: ignore[union-attr]
    assert rules.on_attempt_event(state, event("finished", status="succeeded"), 4.0).note == "duplicate_finished"
    assert rules.on_attempt_event(state, event("finished", status="failed"), 4.0).note == "duplicate_finished"


def test_failure_requeues_while_attempts_remain_then_fails() -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    state = running(config)
    out = rules.on_attempt_event(state, event("finished", status="failed"), 5.0)
    assert out.note == "requeued_failed" and out.requeue is not None and out.closed_attempt is not None
    assert out.closed_attempt.status == "failed"
    retry = out.requeue.attempt
    assert (retry.sequence_id, retry.attempt_id) == (2, rules.retry_attempt_id(R, 2))
    assert out.requeue.status == "requeuing" and out.requeue.input == {"q": 1} and out.requeue.config == config
    state = out.state
    assert state is not None and state.rollout.status == "requeuing" and state.attempts == 2
    # the requeued task comes back on agl.tasks: an echo, ignored
    assert rules.on_task(state, out.requeue, 5.5).note == "duplicate_task"
    # the old attempt finishing late does not touch the new one
    assert rules.on_attempt_event(state, event("finished", status="succeeded"), 6.0).note == "superseded_event"
    assert rules.on_activity(state, "at-00000001", 6.0).note == "superseded_activity"
    state = apply(state, rules.on_attempt_event(state, event("started", retry.attempt_id, 2), 7.0))
    state = apply(state, rules.on_activity(state, retry.attempt_id, 7.5))
    out = rules.on_attempt_event(state, event("finished", retry.attempt_id, 2, "failed"), 8.0)
    assert out.note == "failed_failed" and out.requeue is None
    assert out.state is not None and out.state.rollout.status == "failed" and out.state.terminal


def test_status_not_in_retry_condition_fails_immediately() -> None:
    state = running(RolloutConfig(max_attempts=5, retry_condition=["timeout"]))
    out = rules.on_attempt_event(state, event("finished", status="failed"), 5.0)
    assert out.requeue is None and out.state is not None and out.state.rollout.status == "failed"


def test_watchdog_timeout_and_unresponsive() -> None:
    config = RolloutConfig(timeout_seconds=10, unresponsive_seconds=3, max_attempts=3, retry_condition=["timeout", "unresponsive"])
    state = running(config)  # started at t=1
    assert not rules.watchdog(state, 4.0).changed
    assert not rules.watchdog(state, 6.0, last_seen=4.0).changed  # a recent span keeps it alive
    out = rules.watchdog(state, 8.0, last_seen=4.5)
    assert out.note == "requeued_unresponsive" and out.requeue is not None and out.requeue.attempt.sequence_id == 2
    state = running(config)
    out = rules.watchdog(state, 11.5, last_seen=11.4)
    assert out.note == "requeued_timeout" and out.closed_attempt is not None and out.closed_attempt.status == "timeout"
    # not started (still queued) attempts are not watched
    queued = rules.on_task(None, task(config), 0.0).state
    assert queued is not None and not rules.watched(queued) and not rules.watchdog(queued, 1000.0).changed


def test_unresponsive_without_retry_fails_and_a_span_revives_it() -> None:
    state = running(RolloutConfig(unresponsive_seconds=1))
    out = rules.watchdog(state, 10.0)
    state = out.state
    assert state is not None and state.rollout.status == "failed" and state.attempt.status == "unresponsive"  # type: ignore[union-attr]
    revived = rules.on_activity(state, "at-00000001", 11.0)
    assert revived.note == "revived" and revived.state is not None
    assert (revived.state.rollout.status, revived.state.attempt.status, revived.state.rollout.end_time) == ("running", "running", None)  # type: ignore[union-attr]
    done = rules.on_attempt_event(revived.state, event("finished", status="succeeded"), 12.0)
    assert done.state is not None and done.state.rollout.status == "succeeded"


def test_max_attempts_exhausted_by_timeouts() -> None:
    config = RolloutConfig(timeout_seconds=1, max_attempts=2, retry_condition=["timeout"])
    state = running(config)
    out = rules.watchdog(state, 5.0)
    state, retry = out.state, out.requeue
    assert state is not None and retry is not None
    state = apply(state, rules.on_attempt_event(state, event("started", retry.attempt.attempt_id, 2), 6.0))
    out = rules.watchdog(state, 7.5)
    assert out.note == "failed_timeout" and out.state is not None and out.state.rollout.status == "failed"
    assert out.state.attempts == 2


def test_cancel_and_late_inputs_after_terminal() -> None:
    state = running(RolloutConfig(max_attempts=3, retry_condition=["failed"]))
    out = rules.on_cancel(state, RolloutControl(rollout_id=R), 5.0)
    state = out.state
    assert state is not None and state.rollout.status == "cancelled"
    assert rules.on_attempt_event(state, event("finished", status="failed"), 6.0).note == "late_event"
    assert rules.on_cancel(state, RolloutControl(rollout_id=R), 6.0).note == "late_cancel"
    assert rules.on_task(state, task(attempt_id="at-00000009", seq=2), 6.0).note == "late_task"


def test_events_overtaking_the_task_are_merged_not_lost() -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    state = rules.on_attempt_event(None, event("started"), 1.0).state
    assert state is not None and not state.has_task and state.rollout.config == RolloutConfig()
    state = apply(state, rules.on_activity(state, "at-00000001", 2.0))
    state = apply(state, rules.on_task(state, task(config), 2.5))
    assert state is not None and state.has_task and state.rollout.status == "running"
    assert state.rollout.config == config and state.rollout.input == {"q": 1}
    out = rules.on_attempt_event(state, event("finished", status="failed"), 3.0)
    assert out.requeue is not None  # the config learned from the task applies
    # a cancel before the task: the task arriving later cannot start the rollout
    cancelled = rules.on_cancel(None, RolloutControl(rollout_id=R), 1.0).state
    merged = rules.on_task(cancelled, task(), 2.0).state
    assert merged is not None and merged.rollout.status == "cancelled" and merged.rollout.input == {"q": 1}


def test_unknown_and_stale_inputs_are_reported() -> None:
    assert rules.on_attempt_event(None, event("finished", status="succeeded"), 1.0).note == "unknown_rollout"
    assert rules.on_activity(None, "at-x", 1.0).note == "unknown_rollout"
    state = rules.on_task(None, task(attempt_id="at-00000002", seq=2), 0.0).state
    assert rules.on_task(state, task(attempt_id="at-00000001", seq=1), 1.0).note == "stale_task"
    assert rules.on_attempt_event(state, event("started", "at-00000001", 1), 1.0).note == "superseded_event"


def test_retry_attempt_ids_are_deterministic_and_upstream_shaped() -> None:
    a = rules.retry_attempt_id(R, 2)
    assert a == rules.retry_attempt_id(R, 2) != rules.retry_attempt_id(R, 3)
    assert a.startswith("at-") and len(a) == 11


def test_rules_never_modify_the_state_they_are_given() -> None:
    config = RolloutConfig(timeout_seconds=1, unresponsive_seconds=1, max_attempts=3, retry_condition=["failed", "timeout"])
    state = running(config)
    before = state.model_dump()
    rules.on_attempt_event(state, event("finished", status="failed"), 5.0)
    rules.watchdog(state, 50.0)
    rules.on_cancel(state, RolloutControl(rollout_id=R), 5.0)
    rules.on_attempt_event(state, event("started", "at-00000002", 2), 5.0)
    assert state.model_dump() == before


def test_a_span_overtaking_its_task_and_started_event_is_not_lost() -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    first = rules.on_activity(None, "at-00000007", 1.0, rollout_id=R)
    state = first.state
    assert first.note == "span_before_task" and state is not None and not state.has_task
    assert (state.rollout.status, state.attempt.status) == ("running", "running")  # type: ignore[union-attr]
    assert rules.on_activity(None, "at-00000007", 1.0).note == "unknown_rollout"  # no rollout id: cannot create
    state = apply(state, rules.on_attempt_event(state, event("started", "at-00000007", 2), 2.0))
    assert state is not None and state.attempt.worker_id == "w"  # type: ignore[union-attr]
    state = apply(state, rules.on_task(state, task(config, attempt_id="at-00000007", seq=2), 3.0))
    assert state is not None and state.has_task and state.rollout.status == "running"
    assert (state.attempt.sequence_id, state.attempts, state.rollout.config) == (2, 2, config)  # type: ignore[union-attr]
    out = rules.on_attempt_event(state, event("finished", "at-00000007", 2, "failed"), 4.0)
    assert out.note == "failed_failed"  # attempt 2 of 2: the number learned from the task applies
