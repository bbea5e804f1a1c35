"""The client's rollout view: a bounded window of finished rollouts beside every live one."""

from __future__ import annotations

from typing import Optional

import pytest

from agl_stream.client.rollout_view import RolloutView
from agl_stream.types import Attempt, Rollout, RolloutSnapshot


def _snapshot(n: int, status: str, at: float, attempt_status: Optional[str] = None) -> RolloutSnapshot:
    rid = f"ro-{n:012d}"
    attempt = Attempt(rollout_id=rid, attempt_id=f"at-{n:08d}", status=attempt_status or "running")
    return RolloutSnapshot(rollout=Rollout(rollout_id=rid, status=status, input={"n": n}), attempt=attempt, attempts=1,
                           updated_at=at)  # fmt: skip


def test_finished_rollouts_beyond_the_window_are_forgotten_oldest_finished_first() -> None:
    forgotten: list[str] = []
    view = RolloutView(max_finished=2, on_evict=forgotten.append)
    for n in range(4):
        view.apply(None, _snapshot(n, "running", at=1.0))
    for n in (2, 0, 3):  # finishing order, not arrival order, decides
        view.apply(None, _snapshot(n, "succeeded", at=2.0, attempt_status="succeeded"))
    assert forgotten == ["ro-000000000002"] and view.evicted == 1 and view.finished_held == 2
    assert not view.knows("ro-000000000002") and view.attempts("ro-000000000002") == []
    assert view.knows("ro-000000000001")  # live: always held
    view.apply(None, _snapshot(0, "succeeded", at=3.0, attempt_status="succeeded"))  # re-asserted: keeps its place
    view.apply(None, _snapshot(1, "failed", at=3.0, attempt_status="failed"))
    assert forgotten == ["ro-000000000002", "ro-000000000000"]
    assert [r.rollout_id for r in view.rollouts()] == ["ro-000000000001", "ro-000000000003"]


def test_an_unbounded_view_keeps_everything() -> None:
    view = RolloutView()
    for n in range(50):
        view.apply(None, _snapshot(n, "succeeded", at=1.0))
    assert len(view) == 50 and view.evicted == 0
    with pytest.raises(ValueError, match="max_finished"):
        RolloutView(max_finished=-1)


def test_rollouts_builds_only_what_the_ids_and_statuses_select_in_the_views_order() -> None:
    view = RolloutView()
    for n, status in enumerate(["running", "succeeded", "failed", "succeeded"]):
        view.apply(None, _snapshot(n, status, at=1.0))
    ids = ["ro-000000000003", "ro-000000000000", "ro-000000000009"]
    assert [r.rollout_id for r in view.rollouts(ids=ids)] == ["ro-000000000000", "ro-000000000003"]
    assert [r.rollout_id for r in view.rollouts(statuses={"succeeded"})] == ["ro-000000000001", "ro-000000000003"]
    assert [r.rollout_id for r in view.rollouts(ids=ids, statuses={"running"})] == ["ro-000000000000"]


def test_a_success_reported_here_is_not_undone_by_a_snapshot_from_before_it_was_applied() -> None:
    view = RolloutView()
    running = _snapshot(1, "running", at=1.0)
    view.apply(None, running)
    assert running.attempt is not None
    done = running.attempt.model_copy(update={"status": "succeeded", "end_time": 5.0})
    view.provisional_success(running, done)
    assert view.rollout("ro-000000000001").status == "succeeded"  # type: ignore[union-attr]
    assert view.matches("ro-000000000001", lambda s: True) is None  # the state machine has not said it
    view.apply(None, _snapshot(1, "running", at=2.0))  # written before the success was applied: skipped
    assert view.rollout("ro-000000000001").status == "succeeded"  # type: ignore[union-attr]
    assert [a.status for a in view.attempts("ro-000000000001")] == ["succeeded"]
    view.apply(None, _snapshot(1, "succeeded", at=3.0, attempt_status="succeeded"))  # applied
    assert view.matches("ro-000000000001", lambda s: s.rollout.status == "succeeded") is not None


def test_a_success_reported_after_the_state_machine_already_applied_it_leaves_its_snapshot() -> None:
    """The follower may apply the state machine's answer between the broker's acknowledgement of the success and
    the writer's provisional entry; a provisional entry over it would never be replaced, and waits would not end."""
    view = RolloutView()
    running = _snapshot(1, "running", at=1.0)
    view.apply(None, running)
    assert running.attempt is not None
    applied = _snapshot(1, "succeeded", at=2.0, attempt_status="succeeded")
    view.apply(None, applied)  # the state machine was faster than the writer's continuation
    view.provisional_success(running, running.attempt.model_copy(update={"status": "succeeded", "end_time": 5.0}))
    assert view.matches("ro-000000000001", lambda s: s.rollout.status == "succeeded") == applied
    view.apply(None, _snapshot(1, "succeeded", at=3.0, attempt_status="succeeded"))  # later snapshots still apply
    assert view.snapshot("ro-000000000001").updated_at == 3.0  # type: ignore[union-attr]


def test_a_success_reported_here_gives_way_to_the_watchdogs_outcome() -> None:
    view = RolloutView()
    running = _snapshot(1, "running", at=1.0)
    view.apply(None, running)
    assert running.attempt is not None
    view.provisional_success(running, running.attempt.model_copy(update={"status": "succeeded"}))
    view.apply(None, _snapshot(1, "failed", at=2.0, attempt_status="timeout"))  # the watchdog closed it first
    read = view.rollout("ro-000000000001")
    assert read is not None and read.status == "failed" and view.matches("ro-000000000001", lambda s: True) is not None
