"""The client's view of rollouts and attempts: the state machine's snapshots on ``agl.rollouts``, plus its own writes.

Every snapshot names the rollout and its latest attempt; the state machine also publishes the
closed attempt when it requeues, so following the topic yields every attempt with its last known
status. Writes of this client (an enqueued rollout, a claimed attempt) enter the view at once as
*provisional* entries that any snapshot of the state machine replaces, so a rollout is readable
right after it was written (upstream's read-your-writes for its own writes).

**Bounded.** Live rollouts (not terminal) are always kept. Of the finished ones, the view keeps the
``max_finished`` that finished last (in the order this view saw them finish) and forgets older ones, so a
client that follows the topic from its start (a front door, an algorithm) holds a bounded window however long
the deployment has run: about 3.5 KB per rollout plus its input's size. Forgotten rollouts are history, read
from ClickHouse by the client (:mod:`agl_stream.client.rollout_history`); ``evicted`` says whether any were.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Collection, Iterable, Optional, Union

from agl_stream.types import TERMINAL_ROLLOUT_STATUSES, Attempt, AttemptedRollout, Rollout, RolloutSnapshot

PROVISIONAL = 0.0  # updated_at of local entries: older than any state machine snapshot
#: attempt statuses after which the state machine ignores a runner's outcome (its rules' FINAL_ATTEMPT_STATUSES)
FINAL_ATTEMPT_STATUSES = frozenset({"succeeded", "failed", "timeout"})


class RolloutView:
    def __init__(self, max_finished: Optional[int] = None, on_evict: Optional[Callable[[str], None]] = None) -> None:
        """``max_finished``: finished rollouts kept (None: all); ``on_evict(rollout_id)``: called for each one
        forgotten, so the owner can drop what it keeps per rollout too."""
        if max_finished is not None and max_finished < 0:
            raise ValueError(f"max_finished must be >= 0 or None, got {max_finished}")
        self.max_finished = max_finished
        self.on_evict = on_evict
        self._snapshots: dict[str, RolloutSnapshot] = {}
        self._attempts: dict[str, dict[str, tuple[float, Attempt]]] = {}  # rollout -> attempt id -> (seen at, attempt)
        self._local: set[str] = set()  # rollouts whose current entry is this client's own write
        self._finished: OrderedDict[str, None] = OrderedDict()  # terminal rollouts, in the order they finished here
        self._succeeded_here: dict[str, str] = {}  # rollout -> its attempt this client reported succeeded, not applied yet
        self.evicted = 0  # finished rollouts forgotten so far (their reads go to history)

    # ---------------------------------------------------------------- folding records in

    def apply(self, key: Optional[str], snapshot: RolloutSnapshot) -> None:
        rid = snapshot.rollout.rollout_id
        if rid in self._succeeded_here:
            if not self._decides(snapshot, self._succeeded_here[rid]):
                return  # written before the state machine applied this client's success: reads must not go back
            del self._succeeded_here[rid]
        known = self._snapshots.get(rid)
        if known is None or snapshot.updated_at >= known.updated_at:
            self._snapshots[rid] = snapshot
            self._local.discard(rid)
            if snapshot.rollout.status in TERMINAL_ROLLOUT_STATUSES:
                self._finished.setdefault(rid, None)  # a re-asserted terminal snapshot keeps its place
            else:
                self._finished.pop(rid, None)
        if snapshot.attempt is not None:
            self._note_attempt(snapshot.attempt, snapshot.updated_at)
        self._evict()

    @staticmethod
    def _decides(snapshot: RolloutSnapshot, attempt_id: str) -> bool:
        """The snapshot settles the attempt this client reported succeeded: it closed it (the success applied, or the
        watchdog's outcome first), moved on to another attempt, or ended the rollout."""
        latest = snapshot.attempt
        return (latest is None or latest.attempt_id != attempt_id or latest.status in FINAL_ATTEMPT_STATUSES
                or snapshot.rollout.status in TERMINAL_ROLLOUT_STATUSES)  # fmt: skip

    def _evict(self) -> None:
        if self.max_finished is None:
            return
        while len(self._finished) > self.max_finished:
            rid, _ = self._finished.popitem(last=False)
            self._snapshots.pop(rid, None)
            self._attempts.pop(rid, None)
            self._local.discard(rid)
            self._succeeded_here.pop(rid, None)
            self.evicted += 1
            if self.on_evict is not None:
                self.on_evict(rid)

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

    def provisional_success(self, snapshot: RolloutSnapshot, attempt: Attempt) -> None:
        """This client reported the latest attempt of ``snapshot`` succeeded (acknowledged, not applied yet): read
        it as the state machine will write it (the attempt and the rollout ``succeeded``) until a snapshot settles it.

        Snapshots the state machine wrote before it applied the success (the attempt still open) are skipped, so
        reads never go back to ``running``. Waits on the state machine (:meth:`matches`, ``wait_for_rollouts``)
        still wait for its own snapshot.

        The state machine's answer may already be here: the follower can apply it between the broker's
        acknowledgement and this call. A snapshot of the state machine that settles the attempt is then kept as it
        is; covering it with a provisional entry would leave nothing to replace that entry, and waits on the
        rollout would never end (2 of 3 runs of upstream's store benchmark stalled on it once the front door's
        producers stopped lingering)."""
        rid = snapshot.rollout.rollout_id
        known = self._snapshots.get(rid)
        if known is not None and rid not in self._local and self._decides(known, attempt.attempt_id):
            return
        rollout = snapshot.rollout.model_copy(update={"status": "succeeded", "end_time": attempt.end_time})
        self._snapshots[rid] = RolloutSnapshot(rollout=rollout, attempt=attempt, attempts=snapshot.attempts,
                                               updated_at=snapshot.updated_at)  # fmt: skip
        self._local.add(rid)
        self._succeeded_here[rid] = attempt.attempt_id
        self._note_attempt(attempt, snapshot.updated_at)  # replaces the open attempt until a snapshot settles it

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

    def rollouts(self, ids: Optional[Iterable[str]] = None,
                 statuses: Optional[Collection[str]] = None) -> list[Union[Rollout, AttemptedRollout]]:  # fmt: skip
        """The rollouts held (only those among ``ids`` / with a status in ``statuses``, when given): a query
        names what it needs, and only that is built (building every rollout costs ~20 us each)."""
        wanted = None if ids is None else set(ids)
        return [
            r for rid in self._snapshots  # the view's order (upstream's unsorted order: as the rollouts arrived)
            if (wanted is None or rid in wanted)
            if (statuses is None or self._snapshots[rid].rollout.status in statuses) and (r := self.rollout(rid)) is not None
        ]  # fmt: skip

    @property
    def finished_held(self) -> int:
        """Finished rollouts held now (at most ``max_finished``)."""
        return len(self._finished)

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
