"""The decoded states the state machine keeps beside its table give exactly what decoding the table gives."""

from __future__ import annotations

from typing import Callable, Optional

from agl_stream.types import RolloutConfig, RolloutControl
from agl_stream_processors.state_machine import rules
from agl_stream_processors.state_machine.decoded import DecodedStates
from agl_stream_processors.state_machine.rules import RolloutState
from tests.processors.state_machine.test_rules import R, event, task

KEY = R.encode()
CONFIG = RolloutConfig(max_attempts=3, unresponsive_seconds=5.0, timeout_seconds=50.0,
                       retry_condition=["failed", "timeout", "unresponsive"])  # fmt: skip
Step = Callable[[Optional[RolloutState], float], rules.Outcome]

#: a lifecycle through every kind of change: retries, the watchdog, a revival, a cancel
STEPS: list[Step] = [
    lambda s, now: rules.on_task(s, task(CONFIG), now),
    lambda s, now: rules.on_attempt_event(s, event("started"), now),
    lambda s, now: rules.on_activity(s, "at-00000001", now),
    lambda s, now: rules.on_attempt_event(s, event("finished", status="failed"), now),  # requeued
    lambda s, now: rules.on_attempt_event(s, event("started", s.attempt.attempt_id, 2), now),  # type: ignore[union-attr]
    lambda s, now: rules.watchdog(s, now + 100.0),  # timeout: requeued again
    lambda s, now: rules.on_attempt_event(s, event("started", s.attempt.attempt_id, 3), now),  # type: ignore[union-attr]
    lambda s, now: rules.watchdog(s, now + 10.0),  # unresponsive on the last attempt: failed
    lambda s, now: rules.on_activity(s, s.attempt.attempt_id, now),  # type: ignore[union-attr]  # revived
    lambda s, now: rules.on_cancel(s, RolloutControl(rollout_id=R, action="cancel"), now),
]


def test_a_kept_state_is_the_decoded_table_value_and_the_rules_never_change_it() -> None:
    decoded, table = DecodedStates(), {}
    statuses = []
    for i, step in enumerate(STEPS):
        raw = table.get(KEY)
        state = decoded.load(KEY, raw)
        fresh = RolloutState.model_validate_json(raw) if raw else None
        assert state == fresh
        assert (state.model_dump_json() if state else None) == (fresh.model_dump_json() if fresh else None)
        before = state.model_dump_json() if state is not None else None
        outcome = step(state, 10.0 * (i + 1))
        assert (state.model_dump_json() if state is not None else None) == before  # the input is untouched
        if outcome.state is not None:
            table[KEY] = outcome.state.model_dump_json().encode()
            decoded.remember(KEY, table[KEY], outcome.state)
        statuses.append(RolloutState.model_validate_json(table[KEY]).rollout.status)
    assert statuses == ["queuing", "preparing", "running", "requeuing", "preparing", "requeuing", "preparing",
                        "failed", "running", "cancelled"]  # fmt: skip
    assert len(decoded) == 0  # terminal: not kept


def test_only_the_very_bytes_written_reuse_the_state() -> None:
    decoded = DecodedStates()
    state = rules.on_task(None, task(), 1.0).state
    assert state is not None
    raw = state.model_dump_json().encode()
    decoded.remember(KEY, raw, state)
    assert decoded.load(KEY, raw) is state
    copy = bytes(bytearray(raw))  # equal bytes put there by someone else (recovery, the changelog catch-up)
    assert decoded.load(KEY, copy) is not state and decoded.load(KEY, copy) == state
    assert decoded.load(KEY, None) is None
    decoded.forget(KEY)
    assert decoded.load(KEY, raw) is not state


def test_the_oldest_written_states_go_first_beyond_the_limit() -> None:
    decoded = DecodedStates(limit=2)
    state = rules.on_task(None, task(), 1.0).state
    assert state is not None
    raws = {key: state.model_dump_json().encode() for key in (b"a", b"b", b"c")}
    for key in (b"a", b"b", b"a", b"c"):  # "a" rewritten after "b": "b" is the oldest when "c" comes
        decoded.remember(key, raws[key], state)
    assert len(decoded) == 2
    assert decoded.load(b"a", raws[b"a"]) is state and decoded.load(b"c", raws[b"c"]) is state
    assert decoded.load(b"b", raws[b"b"]) is not state
