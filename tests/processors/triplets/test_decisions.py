"""The state machine's verdict per finished attempt, from its snapshots (pure logic)."""

from __future__ import annotations

from typing import Optional

from agl_stream.types import Attempt, Rollout, RolloutSnapshot
from agl_stream_processors.triplets.decisions import Decision, Decisions

RID = "ro-aaaaaaaaaaaa"


def snapshot(status: str, attempt_id: Optional[str], sequence_id: int = 1, attempt_status: str = "running") -> RolloutSnapshot:
    attempt = None
    if attempt_id is not None:
        attempt = Attempt(rollout_id=RID, attempt_id=attempt_id, sequence_id=sequence_id, start_time=0.0,
                          status=attempt_status)  # type: ignore[arg-type]  # fmt: skip
    return RolloutSnapshot(rollout=Rollout(rollout_id=RID, status=status, start_time=0.0), attempt=attempt,  # type: ignore[arg-type]
                           attempts=sequence_id)  # fmt: skip


def test_no_snapshot_or_a_running_rollout_means_wait() -> None:
    decisions = Decisions()
    assert decisions.decide(RID, "at-1", 1) is None
    decisions.learn(snapshot("running", "at-1"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) is None


def test_the_attempt_named_by_a_terminal_snapshot_is_final() -> None:
    decisions = Decisions()
    decisions.learn(snapshot("succeeded", "at-1", attempt_status="succeeded"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) == Decision("final", "succeeded")
    decisions.learn(snapshot("failed", "at-1", attempt_status="timeout"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) == Decision("final", "failed")


def test_an_attempt_the_rollout_moved_past_is_superseded_and_stays_so() -> None:
    decisions = Decisions()
    # the unresponsive attempt 1 was closed and the rollout requeued as attempt 2
    decisions.learn(snapshot("requeuing", "at-1", 1, attempt_status="unresponsive"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) is None  # the closed-attempt snapshot alone decides nothing
    decisions.learn(snapshot("requeuing", "at-2", 2, attempt_status="preparing"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) == Decision("superseded", "requeuing")
    assert decisions.decide(RID, "at-2", 2) is None
    # a re-published older snapshot (after a state machine restart) never moves a rollout back
    decisions.learn(snapshot("running", "at-1", 1), now=0.0)
    assert decisions.decide(RID, "at-1", 1) == Decision("superseded", "requeuing")
    assert decisions.stale_snapshots == 1
    decisions.learn(snapshot("succeeded", "at-2", 2, attempt_status="succeeded"), now=0.0)
    assert decisions.decide(RID, "at-2", 2) == Decision("final", "succeeded")
    assert decisions.decide(RID, "at-1", 1) == Decision("superseded", "succeeded")


def test_an_attempt_later_than_the_state_machine_knows_waits() -> None:
    decisions = Decisions()
    decisions.learn(snapshot("running", "at-1", 1), now=0.0)
    assert decisions.decide(RID, "at-2", 2) is None


def test_failed_for_unresponsiveness_waits_for_the_revival_its_finished_event_brings() -> None:
    decisions = Decisions()
    decisions.learn(snapshot("failed", "at-1", 1, attempt_status="unresponsive"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) is None
    decisions.learn(snapshot("succeeded", "at-1", 1, attempt_status="succeeded"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) == Decision("final", "succeeded")


def test_a_cancelled_rollout_decides_its_attempt_whatever_its_status() -> None:
    decisions = Decisions()
    decisions.learn(snapshot("cancelled", "at-1", 1, attempt_status="unresponsive"), now=0.0)
    assert decisions.decide(RID, "at-1", 1) == Decision("final", "cancelled")


def test_terminal_rollouts_are_forgotten_after_the_retention() -> None:
    decisions = Decisions(retention_seconds=10.0)
    decisions.learn(snapshot("succeeded", "at-1", attempt_status="succeeded"), now=0.0)
    decisions.learn(snapshot("running", "at-9").model_copy(update={"rollout": Rollout(rollout_id="ro-bbbbbbbbbbbb", status="running", start_time=0.0)}), now=0.0)
    assert decisions.prune(now=5.0) == 0
    assert decisions.prune(now=11.0) == 1
    assert set(decisions.views) == {"ro-bbbbbbbbbbbb"}
