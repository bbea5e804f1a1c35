"""Outcomes of rollouts as the runners reported them (``finished`` events on ``agl.attempts``).

Algorithms that need a rollout's reward without reading spans (evaluation, APO's beam scores)
follow ``agl.attempts``: the runner's finished event carries the status, the error and the final
reward it computed. The latest finished attempt of a rollout wins (a retry replaces a failure).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from agl_stream.client import StoreClient, TopicFollower
from agl_stream.config import Settings
from agl_stream.types import AttemptEvent, RolloutConfig, RolloutMode


@dataclass(frozen=True)
class RolloutResult:
    rollout_id: str
    attempt_id: str
    status: str
    final_reward: Optional[float]
    error: Optional[str]
    finished_at: float
    #: the final reward's named dimensions when it had several (``{"correct": 1.0, "format": 0.5, ...}``)
    reward_dimensions: Mapping[str, float] = field(default_factory=dict)


class RolloutResults:
    """Keeps the latest finished attempt per rollout, following ``agl.attempts`` from the start."""

    def __init__(self, settings: Settings) -> None:
        self._results: dict[str, RolloutResult] = {}
        self._follower: TopicFollower[AttemptEvent] = TopicFollower(settings, "attempts", AttemptEvent, self._apply)

    def _apply(self, _key: Optional[str], event: AttemptEvent) -> None:
        if event.kind != "finished" or event.status is None:
            return
        previous = self._results.get(event.rollout_id)
        if previous is not None and previous.finished_at > event.timestamp:
            return  # a late duplicate of an older attempt
        reward = event.metadata.get("final_reward")
        self._results[event.rollout_id] = RolloutResult(
            event.rollout_id, event.attempt_id, event.status, float(reward) if reward is not None else None,
            event.error, event.timestamp, dict(event.metadata.get("reward_dimensions") or {}),
        )  # fmt: skip

    async def start(self) -> "RolloutResults":
        await self._follower.start()
        return self

    async def stop(self) -> None:
        await self._follower.stop()

    def get(self, rollout_id: str) -> Optional[RolloutResult]:
        return self._results.get(rollout_id)

    async def wait(self, rollout_ids: Sequence[str], timeout: Optional[float] = None) -> dict[str, RolloutResult]:
        """Results of the given rollouts; waits up to ``timeout`` (None: forever) for all of them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            have = {rid: r for rid in rollout_ids if (r := self._results.get(rid)) is not None}
            if len(have) == len(rollout_ids):
                return have
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return have
            await self._follower.wait_changed(1.0 if remaining is None else min(1.0, remaining))


async def run_dataset(
    client: StoreClient,
    results: RolloutResults,
    dataset: Sequence[Any],
    *,
    mode: RolloutMode = "val",
    resources_id: Optional[str] = None,
    config: Optional[RolloutConfig] = None,
    metadata: Optional[dict[str, Any]] = None,
    timeout: Optional[float] = None,
    item_metadata: Optional[Sequence[Mapping[str, Any]]] = None,
) -> list[Optional[RolloutResult]]:
    """Enqueue one rollout per item and wait for their outcomes (None where none arrived in time).

    ``item_metadata[i]`` is added to item ``i``'s rollout metadata (e.g. which sample of an item it is)."""
    if item_metadata is not None and len(item_metadata) != len(dataset):
        raise ValueError(f"item_metadata has {len(item_metadata)} entries for {len(dataset)} items")
    rollouts = [
        await client.enqueue_rollout(item, mode=mode, resources_id=resources_id, config=config,
                                     metadata={**(metadata or {}), **(item_metadata[i] if item_metadata else {})})
        for i, item in enumerate(dataset)
    ]  # fmt: skip
    ids = [r.rollout_id for r in rollouts]
    got = await results.wait(ids, timeout)
    return [got.get(rid) for rid in ids]


def rewards_of(outcomes: Sequence[Optional[RolloutResult]], missing: float = 0.0) -> list[float]:
    """Final rewards, counting failed or missing rollouts as ``missing`` (they earned nothing)."""
    return [o.final_reward if o is not None and o.final_reward is not None else missing for o in outcomes]

