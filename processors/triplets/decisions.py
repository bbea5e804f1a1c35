"""Which attempt ended each rollout: the state machine's verdict, read from its ``agl.rollouts`` snapshots.

A rollout's outcome is its latest attempt (upstream's rule), and only the trajectory of the attempt
that ended the rollout is trained. The state machine alone knows which attempt that is: a runner
that stalled or lost the broker may report ``finished`` after its attempt was declared
unresponsive and retried. So the triplet processor stamps every trajectory with the state machine's
decision before it leaves (:data:`~agl_stream.types.TrajectoryDecision`):

* ``superseded`` as soon as a snapshot names a *later* attempt of the rollout (attempt numbers only
  grow, so this never changes back);
* ``final`` once a terminal snapshot names *this* attempt. A rollout ``failed`` because this attempt
  went ``unresponsive`` is not decided yet: upstream revives it when the attempt shows signs of life,
  and its ``finished`` event is such a sign (the next snapshot then says ``succeeded``);
* otherwise the decision waits (the state machine has not caught up with this attempt yet).

Pure bookkeeping, no Kafka: the processor feeds :meth:`Decisions.learn` with snapshots and asks
:meth:`Decisions.decide` for each finished attempt.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

from agl_stream.types import TERMINAL_ROLLOUT_STATUSES, RolloutSnapshot, TrajectoryDecision


@dataclass(frozen=True, slots=True)
class RolloutView:
    """The facts of a rollout's latest snapshot that a decision needs (one per rollout held: kept small)."""

    attempt_id: Optional[str]
    sequence_id: int
    rollout_status: str
    attempt_status: Optional[str]
    learned_at: float

    @property
    def terminal(self) -> bool:
        return self.rollout_status in TERMINAL_ROLLOUT_STATUSES


@dataclass(frozen=True)
class Decision:
    decision: TrajectoryDecision
    rollout_status: Optional[str]


def decide(view: Optional[RolloutView], attempt_id: str, sequence_id: int) -> Optional[Decision]:
    """The decision for attempt ``attempt_id`` (number ``sequence_id``) given its rollout's latest view,
    or None while the state machine has not made it (see the module doc)."""
    if view is None:
        return None
    if view.attempt_id == attempt_id:
        if view.terminal and (view.rollout_status == "cancelled" or view.attempt_status != "unresponsive"):
            return Decision("final", view.rollout_status)
        return None
    if view.sequence_id >= sequence_id:
        # a later attempt (or, at the same number, one that is not the state machine's: never trained)
        return Decision("superseded", view.rollout_status)
    return None  # the state machine has not seen this attempt yet


class Decisions:
    """Latest view of every rollout seen on ``agl.rollouts``; terminal ones are forgotten after ``retention_seconds``."""

    def __init__(self, retention_seconds: float = 3600.0) -> None:
        self.retention_seconds = retention_seconds
        self.views: dict[str, RolloutView] = {}
        self.stale_snapshots = 0

    def learn(self, snapshot: RolloutSnapshot, now: float) -> None:
        attempt = snapshot.attempt
        view = RolloutView(
            attempt_id=attempt.attempt_id if attempt is not None else None,
            sequence_id=attempt.sequence_id if attempt is not None else 0,
            # a handful of distinct statuses: one shared string each instead of one per decoded snapshot
            rollout_status=sys.intern(snapshot.rollout.status),
            attempt_status=sys.intern(attempt.status) if attempt is not None else None,
            learned_at=now,
        )
        old = self.views.get(snapshot.rollout.rollout_id)
        if old is not None and view.sequence_id < old.sequence_id:
            self.stale_snapshots += 1  # a re-published older state: attempts never go backwards
            return
        self.views[snapshot.rollout.rollout_id] = view

    def decide(self, rollout_id: str, attempt_id: str, sequence_id: int) -> Optional[Decision]:
        """The decision for a finished attempt, or None while the state machine has not made it."""
        return decide(self.views.get(rollout_id), attempt_id, sequence_id)

    def prune(self, now: float) -> int:
        """Forget terminal rollouts not updated for ``retention_seconds`` (memory stays bounded)."""
        horizon = now - self.retention_seconds
        old = [rid for rid, view in self.views.items() if view.terminal and view.learned_at < horizon]
        for rid in old:
            del self.views[rid]
        return len(old)
