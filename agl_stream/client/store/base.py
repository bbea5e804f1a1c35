"""What the store client's parts share: the settings, the producer, the state machine's rollout view and
the follower that feeds it, and the read-your-writes wait on that view."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from agl_stream.client.errors import ConsistencyTimeout
from agl_stream.client.follow import TopicFollower
from agl_stream.client.rollout_view import RolloutView
from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.types import AttemptedRollout, AttemptEvent, RolloutSnapshot

#: header that marks control records on agl.attempts (read by the rollout state machine)
CONTROL_HEADER = "agl-kind"
#: attempt statuses only the state machine's watchdog sets
WATCHDOG_STATUSES = frozenset({"timeout", "unresponsive"})
FINISHED_BY_RUNNER = frozenset({"succeeded", "failed"})
TRACER_NAME = "agl-stream-store-client"


class StoreBase:
    """The shared state (set up by ``StoreClient.__init__``) and the helpers every part uses."""

    settings: Settings
    bootstrap: Optional[str]
    consistency_timeout: float
    view: RolloutView
    _producer: RecordProducer
    _rollouts: TopicFollower[RolloutSnapshot]

    def _require_rollout(self, rollout_id: str) -> RolloutSnapshot:
        snap = self.view.snapshot(rollout_id)
        if snap is None:
            raise ValueError(f"rollout {rollout_id} not found")
        return snap

    async def _await_view(self, rollout_id: str, predicate: Callable[[RolloutSnapshot], bool], what: str) -> RolloutSnapshot:
        """Wait until the state machine's snapshot of the rollout satisfies ``predicate`` (read-your-writes)."""
        deadline = time.monotonic() + self.consistency_timeout
        while (snap := self.view.matches(rollout_id, predicate)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConsistencyTimeout(
                    f"the state machine did not apply '{what}' to rollout {rollout_id} within {self.consistency_timeout:.0f}s "
                    "(is `agl-stream processors state-machine` running?)"
                )
            await self._rollouts.wait_changed(min(remaining, 0.5))
        return snap

    async def _send_event(self, task: AttemptedRollout, kind: str, **fields: Any) -> None:
        fields["metadata"] = {**task.metadata, **(fields.get("metadata") or {})}
        event = AttemptEvent(kind=kind, rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id,  # type: ignore[arg-type]
                             attempt_sequence_id=task.attempt.sequence_id, mode=task.mode,
                             resources_id=task.resources_id, **fields)  # fmt: skip
        await self._producer.send_and_wait(self.settings.topic("attempts"), event, key=task.rollout_id)
