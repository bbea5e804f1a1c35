"""The algorithm's side of the hub: enqueue rollouts, publish resources, wait for results.

Method names and arguments follow upstream's ``LightningStore`` so an algorithm written against
the store ports over: ``enqueue_rollout``, ``enqueue_many_rollouts``, ``add_resources``,
``update_resources``, ``get_latest_resources``, ``get_resources_by_id``, ``wait_for_rollouts``,
``get_rollout_by_id``.

* A rollout is enqueued as an :class:`~agl_stream.types.AttemptedRollout` on ``agl.tasks`` with its
  first attempt pre-assigned (keyed by rollout id); requeued attempts come from the state machine.
* Resources go to the compacted ``agl.resources`` twice: under their ``resources_id`` and under
  ``latest``. Versions increase by one per update; one algorithm process is the writer.
* Rollout status is read from the compacted ``agl.rollouts`` written by the state machine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.client.follow import TopicFollower
from agl_stream.client.resources import LATEST_KEY, ResourceCache
from agl_stream.config import Settings
from agl_stream.ids import generate_attempt_id, generate_resources_id, generate_rollout_id
from agl_stream.kafka import RecordProducer
from agl_stream.types import (
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    NamedResources,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutControl,
    RolloutMode,
    RolloutSnapshot,
)

#: header that marks control records on agl.attempts (read by the rollout state machine)
CONTROL_HEADER = "agl-kind"


class EnqueueRolloutRequest(BaseModel):
    """One rollout to enqueue (upstream's request model)."""

    model_config = ConfigDict(extra="forbid")
    input: Any = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class StoreClient:
    """Async client for algorithms; use as ``async with StoreClient(settings) as store: ...``."""

    def __init__(self, settings: Settings, *, bootstrap: Optional[str] = None) -> None:
        self.settings = settings
        self._producer = RecordProducer(settings, bootstrap)
        self.resources = ResourceCache(settings, bootstrap=bootstrap)
        self._snapshots: dict[str, RolloutSnapshot] = {}
        self._rollouts = TopicFollower(settings, "rollouts", RolloutSnapshot, self._apply_snapshot, bootstrap=bootstrap)
        self._started = False

    async def start(self) -> "StoreClient":
        if not self._started:
            await self._producer.start()
            await self.resources.start()
            await self._rollouts.start()
            self._started = True
        return self

    async def stop(self) -> None:
        if self._started:
            self._started = False
            try:
                await self._producer.stop()
            finally:
                await self.resources.stop()
                await self._rollouts.stop()

    async def __aenter__(self) -> "StoreClient":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- rollouts

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
        tasks: list[AttemptedRollout] = []
        now = time.time()
        for request in rollouts:
            req = request if isinstance(request, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(request)
            rollout_id = generate_rollout_id()
            tasks.append(
                AttemptedRollout(
                    rollout_id=rollout_id,
                    input=req.input,
                    start_time=now,
                    mode=req.mode,
                    resources_id=req.resources_id,
                    status="queuing",
                    config=req.config or RolloutConfig(),
                    metadata=req.metadata,
                    attempt=Attempt(rollout_id=rollout_id, attempt_id=generate_attempt_id(), sequence_id=1, start_time=now),
                )
            )
        topic = self.settings.topic("tasks")
        await self._producer.send_many(topic, [(task.rollout_id, task) for task in tasks])
        return [Rollout.model_validate(task.model_dump(exclude={"attempt"})) for task in tasks]

    def _apply_snapshot(self, key: Optional[str], snapshot: RolloutSnapshot) -> None:
        known = self._snapshots.get(snapshot.rollout.rollout_id)
        if known is None or snapshot.updated_at >= known.updated_at:
            self._snapshots[snapshot.rollout.rollout_id] = snapshot

    async def cancel_rollout(self, rollout_id: str, reason: Optional[str] = None) -> None:
        """Ask the state machine to cancel a rollout (upstream: ``update_rollout(status="cancelled")``).

        The request is a ``RolloutControl`` on ``agl.attempts`` (header ``agl-kind: control``), keyed
        by rollout id so it is ordered with the rollout's attempt events."""
        control = RolloutControl(rollout_id=rollout_id, reason=reason)
        await self._producer.send_and_wait(self.settings.topic("attempts"), control, key=rollout_id,
                                           headers={CONTROL_HEADER: "control"})  # fmt: skip

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Rollout]:
        snapshot = self._snapshots.get(rollout_id)
        return snapshot.rollout if snapshot is not None else None

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        """The rollouts among ``rollout_ids`` that reached a terminal status, waiting up to ``timeout`` seconds
        (None: until all are done) for the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [
                snap.rollout
                for rid in rollout_ids
                if (snap := self._snapshots.get(rid)) is not None and snap.rollout.status in TERMINAL_ROLLOUT_STATUSES
            ]
            if len(done) == len(rollout_ids):
                return done
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return done
            await self._rollouts.wait_changed(1.0 if remaining is None else min(remaining, 1.0))

    # ---------------------------------------------------------------- resources

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new set of resources under a new id; it becomes the latest."""
        return await self._publish(generate_resources_id(), resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new version of existing resources; it becomes the latest."""
        return await self._publish(resources_id, resources)

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return self.resources.latest()

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        return self.resources.get(resources_id)

    async def _publish(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        now = time.time()
        previous = self.resources.get(resources_id)
        update = ResourcesUpdate.model_validate(
            {
                "resources_id": resources_id,
                "resources": resources,
                "create_time": previous.create_time if previous else now,
                "update_time": now,
                "version": self.resources.max_version + 1,
            }
        )
        topic = self.settings.topic("resources")
        await asyncio.gather(
            await self._producer.send(topic, update, key=resources_id),
            await self._producer.send(topic, update, key=LATEST_KEY),
        )
        self.resources.apply(resources_id, update)
        return update
