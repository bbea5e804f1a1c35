"""Rollout and attempt writes: each becomes a topic record (``agl.tasks`` or ``agl.attempts``), and waits, where
upstream reads its own writes, until the state machine's snapshot shows it."""

from __future__ import annotations

import time
from typing import Any, Callable, Literal, Optional, Sequence, Union

from agl_stream.client.errors import UnsupportedOnStream
from agl_stream.client.paging import UNSET, Unset
from agl_stream.client.resources import ResourceCache
from agl_stream.client.rollout_view import FINAL_ATTEMPT_STATUSES
from agl_stream.client.store.base import CONTROL_HEADER, FINISHED_BY_RUNNER, WATCHDOG_STATUSES, StoreBase
from agl_stream.client.task_queue import TaskQueue
from agl_stream.ids import generate_attempt_id, generate_rollout_id
from agl_stream.kafka.claim import CLAIMED_HEADER
from agl_stream.types import (
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    Rollout,
    RolloutConfig,
    RolloutControl,
    RolloutMode,
    RolloutSnapshot,
    RolloutStatus,
)


class RolloutWrites(StoreBase):
    resources: ResourceCache
    _tasks: TaskQueue
    _spans_written: Callable[[str, str], int]  # how many spans this client wrote for an attempt (SpanStore)

    async def enqueue_rollout(
        self,
        input: Any,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        (rollout,) = await self.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata or {})]
        )
        return rollout

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest | dict[str, Any]]) -> list[Rollout]:
        """Enqueue rollouts (status ``queuing``, first attempt pre-assigned); returns once the broker has them."""
        tasks = [self._new_task(r if isinstance(r, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(r))
                 for r in rollouts]  # fmt: skip
        await self._producer.send_many(self.settings.topic("tasks"), [(task.rollout_id, task) for task in tasks])
        for task in tasks:
            self.view.provisional(task, task.attempt)
        return [Rollout.model_validate(task.model_dump(exclude={"attempt"})) for task in tasks]

    def _new_task(self, req: EnqueueRolloutRequest, status: RolloutStatus = "queuing",
                  worker_id: Optional[str] = None) -> AttemptedRollout:  # fmt: skip
        now = time.time()
        rollout_id = generate_rollout_id()
        attempt = Attempt(rollout_id=rollout_id, attempt_id=generate_attempt_id(), sequence_id=1, start_time=now,
                          worker_id=worker_id)  # fmt: skip
        return AttemptedRollout(
            rollout_id=rollout_id, input=req.input, start_time=now, mode=req.mode, resources_id=req.resources_id,
            status=status, config=(req.config or RolloutConfig()).model_copy(deep=True), metadata=dict(req.metadata),
            attempt=attempt,
        )  # fmt: skip

    async def start_rollout(
        self,
        input: Any,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
        worker_id: Optional[str] = None,
    ) -> AttemptedRollout:
        """Create a rollout and its first attempt for the caller to run now, bypassing the queue.

        The task is written to ``agl.tasks`` marked as claimed (runners skip it; the state machine
        learns its config) and its attempt reported ``started``; status ``preparing``."""
        if resources_id is None and (latest := self.resources.latest()) is not None:
            resources_id = latest.resources_id
        req = EnqueueRolloutRequest(input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata or {})
        return await self._start_claimed(self._new_task(req, "preparing", worker_id), worker_id)

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        """A new attempt (``sequence_id`` + 1, ``preparing``) of a rollout, for the caller to run now."""
        self._require_rollout(rollout_id)
        # The state machine must know the current attempt before a later one appears: its records and
        # the new attempt's travel on different topics, and a span cannot tell which attempt number it has.
        snap = await self._await_view(rollout_id, lambda s: True, "the rollout's earlier writes")
        current = self.view.snapshot(rollout_id)  # this client's success, acknowledged but maybe not applied yet
        if current is not None and current.rollout.status in TERMINAL_ROLLOUT_STATUSES:
            snap = current
        if snap.rollout.status in TERMINAL_ROLLOUT_STATUSES:
            raise UnsupportedOnStream(
                "start_attempt", f"rollout {rollout_id} is {snap.rollout.status}; the state machine keeps terminal "
                "rollouts terminal (late events of a finished rollout are ignored)",
                "enqueue_rollout / start_rollout with the same input",
            )  # fmt: skip
        sequence_id = max(snap.attempts, snap.attempt.sequence_id if snap.attempt else 0) + 1
        attempt = Attempt(rollout_id=rollout_id, attempt_id=generate_attempt_id(), sequence_id=sequence_id,
                          worker_id=worker_id)  # fmt: skip
        task = AttemptedRollout(**snap.rollout.model_copy(update={"status": "preparing"}).model_dump(), attempt=attempt)
        return await self._start_claimed(task, worker_id)

    async def _start_claimed(self, task: AttemptedRollout, worker_id: Optional[str]) -> AttemptedRollout:
        await self._producer.send_and_wait(self.settings.topic("tasks"), task, key=task.rollout_id,
                                           headers={CLAIMED_HEADER: worker_id or "store-client"})  # fmt: skip
        await self._send_event(task, "started", worker_id=worker_id)
        self.view.provisional(task, task.attempt)
        return task

    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> Optional[AttemptedRollout]:
        """Claim the next task from ``agl.tasks`` as a member of the runners' consumer group; None if none is there now."""
        found = await self.dequeue_many_rollouts(limit=1, worker_id=worker_id)
        return found[0] if found else None

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: Optional[str] = None) -> list[AttemptedRollout]:
        claimed = await self._tasks.dequeue(limit, worker_id)
        for task in claimed:
            self.view.provisional(task, task.attempt)
        return claimed

    async def update_rollout(
        self,
        rollout_id: str,
        input: Any = UNSET,
        mode: Union[Optional[RolloutMode], Unset] = UNSET,
        resources_id: Union[Optional[str], Unset] = UNSET,
        status: Union[RolloutStatus, Unset] = UNSET,
        config: Union[RolloutConfig, Unset] = UNSET,
        metadata: Union[Optional[dict[str, Any]], Unset] = UNSET,
    ) -> Rollout:
        """Only ``status="cancelled"`` applies on a stream (a ``RolloutControl`` the state machine applies);
        returns the rollout once the state machine cancelled it."""
        fields = {"input": input, "mode": mode, "resources_id": resources_id, "config": config, "metadata": metadata}
        changed = [name for name, value in fields.items() if not isinstance(value, Unset)]
        if changed:
            raise UnsupportedOnStream(
                "update_rollout", f"{', '.join(changed)} of a rollout cannot change: its task record on agl.tasks is "
                "immutable and may already be running", "cancel it (status='cancelled') and enqueue_rollout a new one",
            )  # fmt: skip
        snap = self._require_rollout(rollout_id)
        if isinstance(status, Unset) or status == snap.rollout.status:
            return snap.rollout
        if status != "cancelled":
            raise UnsupportedOnStream(
                "update_rollout", f"status {status!r} is the state machine's to set (it follows the latest attempt)",
                "update_attempt(status='succeeded'|'failed') for outcomes, status='cancelled' to stop a rollout, "
                "start_attempt or RolloutConfig(retry_condition, max_attempts) to run it again",
            )  # fmt: skip
        if snap.rollout.status in TERMINAL_ROLLOUT_STATUSES:
            raise ValueError(f"rollout {rollout_id} is already {snap.rollout.status}; a terminal rollout cannot be cancelled")
        control = RolloutControl(rollout_id=rollout_id)
        await self._producer.send_and_wait(self.settings.topic("attempts"), control, key=rollout_id,
                                           headers={CONTROL_HEADER: "control"})  # fmt: skip
        done = await self._await_view(rollout_id, lambda s: s.rollout.status in TERMINAL_ROLLOUT_STATUSES, "cancelled")
        return done.rollout

    async def cancel_rollout(self, rollout_id: str, reason: Optional[str] = None) -> None:
        """Ask the state machine to cancel a rollout without waiting (``update_rollout(status="cancelled")`` waits)."""
        control = RolloutControl(rollout_id=rollout_id, reason=reason)
        await self._producer.send_and_wait(self.settings.topic("attempts"), control, key=rollout_id,
                                           headers={CONTROL_HEADER: "control"})  # fmt: skip

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: Union[str, Literal["latest"]],
        status: Union[AttemptStatus, Unset] = UNSET,
        worker_id: Union[str, Unset] = UNSET,
        last_heartbeat_time: Union[float, Unset] = UNSET,
        metadata: Union[Optional[dict[str, Any]], Unset] = UNSET,
        *,
        span_count: Union[Optional[int], Unset] = UNSET,
    ) -> Attempt:
        """Report an attempt's progress as the runner's ``AttemptEvent`` records.

        ``succeeded``/``failed`` -> ``finished`` (with the number of spans this client added, so the
        triplet processor knows when it has them all). A success of the rollout's latest, still open attempt returns
        once the broker acknowledged it and reads back ``succeeded`` here at once; a failure (which the retry rules
        decide) or a late report returns once the state machine applied it;
        ``preparing``/``running`` or a ``worker_id`` -> ``started`` (an attempt becomes ``running`` with
        its first span, as upstream's ``add_span``); ``last_heartbeat_time`` alone -> ``heartbeat``.
        ``timeout``/``unresponsive`` are the watchdog's (``RolloutConfig``) and are refused.
        ``span_count`` (agl-stream only) overrides the count a ``finished`` carries: None when the caller
        cannot know it (consumers then wait their grace period instead of a count).
        """
        if not isinstance(status, Unset) and status in WATCHDOG_STATUSES:
            raise UnsupportedOnStream(
                "update_attempt", f"status {status!r} is set by the state machine's watchdog, not by writers",
                "RolloutConfig(timeout_seconds=..., unresponsive_seconds=...) on the rollout, or status='failed'",
            )  # fmt: skip
        snap = self._require_rollout(rollout_id)
        attempt = self._resolve_attempt(snap, attempt_id)
        updates: dict[str, Any] = {}
        if not isinstance(worker_id, Unset):
            updates["worker_id"] = worker_id
        if not isinstance(metadata, Unset):
            updates["metadata"] = dict(metadata or {})
        if not isinstance(last_heartbeat_time, Unset):
            updates["last_heartbeat_time"] = last_heartbeat_time
        if not isinstance(status, Unset):
            updates["status"] = status
            if status in FINISHED_BY_RUNNER:
                updates["end_time"] = time.time()
        updated = attempt.model_copy(update=updates)
        task = self._task_of(snap, updated)
        event_meta = dict(updated.metadata)
        if not isinstance(status, Unset) and status in FINISHED_BY_RUNNER:
            if isinstance(span_count, Unset):
                span_count = self._spans_written(rollout_id, updated.attempt_id)
            await self._send_event(task, "finished", status=status, worker_id=updated.worker_id,
                                   span_count=span_count, metadata=event_meta)  # fmt: skip
            aid = updated.attempt_id
            if status == "succeeded" and self._settles_the_rollout(snap, aid):
                # Safe once acknowledged: the event is on the attempt's partition after everything this client wrote
                # for it, and the state machine's rule for a running latest attempt that succeeded is fixed (the
                # rollout succeeds). Reads here show it at once; waits on the state machine still wait for it.
                self.view.provisional_success(snap, updated)
                return updated

            def applied(s: RolloutSnapshot) -> bool:
                return s.attempt is not None and (s.attempt.attempt_id != aid or s.attempt.status in FINISHED_BY_RUNNER)

            await self._await_view(rollout_id, applied, f"attempt {aid} {status}")
            return self.view.attempt(rollout_id, aid) or updated
        if "status" in updates or "worker_id" in updates:
            await self._send_event(task, "started", worker_id=updated.worker_id, metadata=event_meta)
        elif "last_heartbeat_time" in updates or "metadata" in updates:
            await self._send_event(task, "heartbeat", worker_id=updated.worker_id, metadata=event_meta,
                                   timestamp=updated.last_heartbeat_time or time.time())  # fmt: skip
        self.view.provisional(snap.rollout, updated)
        return updated

    @staticmethod
    def _settles_the_rollout(snap: RolloutSnapshot, attempt_id: str) -> bool:
        """The attempt is the rollout's latest and still open, so a success decides the rollout (otherwise the state
        machine may ignore it: a late or duplicate report, an attempt already closed by the watchdog; then wait)."""
        latest = snap.attempt
        return (latest is not None and latest.attempt_id == attempt_id and latest.status not in FINAL_ATTEMPT_STATUSES
                and snap.rollout.status not in TERMINAL_ROLLOUT_STATUSES)  # fmt: skip

    def _resolve_attempt(self, snap: RolloutSnapshot, attempt_id: str) -> Attempt:
        rid = snap.rollout.rollout_id
        if attempt_id == "latest":
            if snap.attempt is None:
                raise ValueError(f"rollout {rid} has no attempt yet")
            return snap.attempt
        found = self.view.attempt(rid, attempt_id)
        if found is None:
            raise ValueError(f"attempt {attempt_id} not found for rollout {rid}")
        return found

    @staticmethod
    def _task_of(snap: RolloutSnapshot, attempt: Attempt) -> AttemptedRollout:
        return AttemptedRollout(**snap.rollout.model_dump(), attempt=attempt)
