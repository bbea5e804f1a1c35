"""The changelog replay keeps each rollout's highest revision (pure logic; the broker test is in test_state_machine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from agl_stream.types import Rollout
from agl_stream_processors.state_machine.revisions import newest_revisions, revision_of
from agl_stream_processors.state_machine.rules import RolloutState


@dataclass
class Event:
    key: bytes
    value: Optional[bytes]


def state(revision: int, status: str = "running", user_input: Optional[dict[str, object]] = None) -> bytes:
    rollout = Rollout(rollout_id="ro-1", status=status, start_time=0.0, input=user_input or {})  # type: ignore[arg-type]
    return RolloutState(rollout=rollout, revision=revision).model_dump_json().encode()


def test_the_revision_is_read_from_the_states_last_field_whatever_the_users_input_holds() -> None:
    assert state(7).endswith(b'"revision":7}')
    assert revision_of(state(12, user_input={"revision": 999, "note": '"revision":5'})) == 12
    assert revision_of(b'{"rollout": {}, "updated_at": 1.0}') == 0  # written before revisions
    assert revision_of(None) is None and revision_of(b"") is None


def test_a_late_write_of_an_older_revision_is_skipped_and_everything_else_applies_in_order() -> None:
    a, b = b"ro-a", b"ro-b"
    events = [Event(a, state(1)), Event(a, state(2, "succeeded")), Event(b, state(1)),
              Event(a, state(1)),  # the zombie's stale 'running', written after the owner's terminal state
              Event(b, state(1)),  # the same step again (at-least-once): applies, as before
              Event(b, None), Event(b, state(1))]  # fmt: skip
    kept, skipped = newest_revisions(events, lambda key: None)
    assert skipped == [a]
    assert [(e.key, revision_of(e.value)) for e in kept] == [(a, 1), (a, 2), (b, 1), (b, 1), (b, None), (b, 1)]


def test_what_the_table_holds_already_counts() -> None:
    kept, skipped = newest_revisions([Event(b"ro-a", state(3)), Event(b"ro-a", state(5))], lambda key: state(4))
    assert skipped == [b"ro-a"] and [revision_of(e.value) for e in kept] == [5]
