"""The client's view of rollouts and attempts: the state machine's snapshots on ``agl.rollouts``, plus its own writes.

Every snapshot names the rollout and its latest attempt; the state machine also publishes the
closed attempt when it requeues, so following the topic yields every attempt with its last known
status. Writes of this client (an enqueued rollout, a claimed attempt) enter the view at once as
*provisional* entries that any snapshot of the state machine replaces, so a rollout is readable
right after it was written (upstream's read-your-writes for its own writes).
"""

from __future__ import annotations

from typing import Callable, Optional, Union

from agl_stream.types import Attempt, AttemptedRollout, Rollout, RolloutSnapshot

PROVISIONAL = 0.0  # updated_at of local entries: older than any state machine snapshot


class RolloutView:
    def __init__(self) -> None:
        self._snapshots: dict[str, RolloutSnapshot] = {}
        self._attempts: dict[str, dict[str, tuple[float, Attempt]]] = {}  # rollout -> attempt id -> (seen at, attempt)
        self._local: set[str] = set()  # rollouts whose current entry is this client's own write

    # ---------------------------------------------------------------- folding records in

    def apply(self, key: Optional[str], snapshot: RolloutSnapshot) -> None:
        rid = snapshot.rollout.rollout_id
        known = self._snapshots.get(rid)
        if known is None or snapshot.updated_at >= known.updated_at:
            self._snapshots[rid] = snapshot
            self._local.discard(rid)
        if snapshot.attempt is not None:
            self._note_attempt(snapshot.attempt, snapshot.updated_at)

    def provisional(self, rollout: Rollout, attempt: Optional[Attempt] = None) -> None:
        """Record this client's own write; the state machine's next snapshot of the rollout replaces it."""
        rid = rollout.rollout_id
        known = self._snapshots.get(rid)
        if known is None or rid in self._local or (
            attempt is not None and (known.attempt is None or attempt.sequence_id > known.attempt.sequence_id)
        ):
            attempts = attempt.sequence_id if attempt is not None else 0
            base = Rollout.model_validate(rollout.model_dump(exclude={"attempt"}))
            self._snapshots[rid] = RolloutSnapshot(rollout=base, attempt=attempt, attempts=attempts,
                                                   updated_at=known.updated_at if known is not None else PROVISIONAL)  # fmt: skip
            self._local.add(rid)
        if attempt is not None:
            self._note_attempt(attempt, PROVISIONAL)

    def _note_attempt(self, attempt: Attempt, seen_at: float) -> None:
        by_id = self._attempts.setdefault(attempt.rollout_id, {})
        known = by_id.get(attempt.attempt_id)
        if known is None or seen_at >= known[0]:
            by_id[attempt.attempt_id] = (seen_at, attempt)

    # ---------------------------------------------------------------- reading

    def snapshot(self, rollout_id: str) -> Optional[RolloutSnapshot]:
        return self._snapshots.get(rollout_id)

    def knows(self, rollout_id: str) -> bool:
        return rollout_id in self._snapshots

    def rollout(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        """The rollout with its latest attempt attached (an ``AttemptedRollout``) once it has one, as upstream."""
        snap = self._snapshots.get(rollout_id)
        if snap is None:
            return None
        if snap.attempt is None:
            return snap.rollout
        return AttemptedRollout(**snap.rollout.model_dump(), attempt=snap.attempt)

    def rollouts(self) -> list[Union[Rollout, AttemptedRollout]]:
        return [r for rid in self._snapshots if (r := self.rollout(rid)) is not None]

    def latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        snap = self._snapshots.get(rollout_id)
        return snap.attempt if snap is not None else None

    def attempts(self, rollout_id: str) -> list[Attempt]:
        """Every attempt of the rollout seen so far, in sequence order."""
        return sorted((a for _, a in self._attempts.get(rollout_id, {}).values()), key=lambda a: a.sequence_id)

    def attempt(self, rollout_id: str, attempt_id: str) -> Optional[Attempt]:
        found = self._attempts.get(rollout_id, {}).get(attempt_id)
        return found[1] if found is not None else None

    def count_attempts(self) -> int:
        return sum(len(v) for v in self._attempts.values())

    def __len__(self) -> int:
        return len(self._snapshots)

    def matches(self, rollout_id: str, predicate: Callable[[RolloutSnapshot], bool]) -> Optional[RolloutSnapshot]:
        """The rollout's snapshot from the state machine (not a provisional one) if ``predicate`` holds."""
        snap = self._snapshots.get(rollout_id)
        if snap is not None and rollout_id not in self._local and predicate(snap):
            return snap
        return None
