"""A known set of trajectories for the export tests, inserted the way the sinks write them, and the S3 JSON expected.

* ``ro-alpha`` (train): attempt ``at-1`` was superseded (left out); the final attempt ``at-2`` has three
  LLM calls rewarded null, 0.25 and 1.0 (total 1.25, final reward 1.0); a replay of it is stored too.
* ``ro-beta`` (val): two calls rewarded 0.0 and null (total 0.0, not null).
* ``ro-gamma`` (test): one unrewarded call (total null) and no ``rollouts`` row (task unknown).
"""

from __future__ import annotations

from typing import Any, Optional

from agl_stream.types import Attempt, Rollout, RolloutSnapshot, Trajectory, Triplet
from agl_stream_processors.clickhouse import ClickHouse
from tests.processors.clickhouse.store import insert_records

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
ADAPTER = "TracerTraceToTriplet"
ALPHA_TASK = {"question": "what is two plus two ?", "answer": "4"}


def _triplet(prompt: list[int], response: list[int], reward: Optional[float], version: int, **extra: Any) -> Triplet:
    logprobs = extra.pop("logprobs", None)
    return Triplet(
        prompt={"token_ids": prompt},
        response={"token_ids": response, **({"logprobs": logprobs} if logprobs is not None else {})},
        reward=reward,
        policy_version=version,
        metadata=extra,
    )


def _trajectory(rollout_id: str, attempt_id: str, created: float, triplets: list[Triplet], **fields: Any) -> Trajectory:
    base: dict[str, Any] = dict(
        rollout_id=rollout_id, attempt_id=attempt_id, adapter=ADAPTER, span_count=3 * len(triplets),
        finished_at=created - 0.5, created_at=created, rollout_status="succeeded", triplets=triplets,
    )  # fmt: skip
    return Trajectory(**{**base, **fields})


def trajectories() -> list[Trajectory]:
    alpha = _trajectory(
        "ro-alpha", "at-2", T0 + 10, attempt_sequence_id=2, group_id="g-1", mode="train", resources_id="rs-1",
        final_reward=1.0, metadata={"rollout_metadata": {"group_id": "g-1"}},
        triplets=[
            _triplet([1, 2, 3], [4, 5], None, 3, logprobs=[-0.5, -0.25], response_id="r-1", agent_name="solver"),
            _triplet([1, 2, 3, 4, 5, 6], [7], 0.25, 3, response_id="r-2", agent_name="solver"),
            _triplet([1, 2, 3, 4, 5, 6, 7], [8, 9], 1.0, 4, response_id="r-3", agent_name="checker"),
        ],
    )  # fmt: skip
    superseded = _trajectory(
        "ro-alpha", "at-1", T0 + 1, mode="train", status="failed", decision="superseded", final_reward=0.0,
        triplets=[_triplet([1, 2, 3], [9], 0.0, 2)],
    )  # fmt: skip
    replayed = alpha.model_copy(
        update={"adapter": "replay:tracer", "created_at": T0 + 40, "final_reward": 0.5,
                "triplets": [_triplet([1, 2, 3], [4], 0.5, 3)]}  # fmt: skip
    )
    beta = _trajectory(
        "ro-beta", "at-3", T0 + 20, mode="val", final_reward=0.0,
        triplets=[_triplet([1, 2], [6], 0.0, 4), _triplet([1, 2, 6], [7, 8], None, 4)],
    )  # fmt: skip
    gamma = _trajectory("ro-gamma", "at-4", T0 + 30, mode="test", triplets=[_triplet([3], [4], None, 5)])
    return [alpha, superseded, replayed, beta, gamma]


def snapshots() -> list[RolloutSnapshot]:
    def snapshot(rollout_id: str, mode: str, task: Any, attempt_id: str, sequence: int, **meta: Any) -> RolloutSnapshot:
        rollout = Rollout(rollout_id=rollout_id, input=task, start_time=T0, end_time=T0 + 9, mode=mode,  # type: ignore[arg-type]
                          status="succeeded", metadata=meta)  # fmt: skip
        attempt = Attempt(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence, status="succeeded")
        return RolloutSnapshot(rollout=rollout, attempt=attempt, attempts=sequence, updated_at=T0 + 9)

    return [snapshot("ro-alpha", "train", ALPHA_TASK, "at-2", 2, group_id="g-1"), snapshot("ro-beta", "val", {"q": 2}, "at-3", 1)]


def populate(ch: ClickHouse) -> None:
    insert_records(ch, "rollouts", snapshots())
    insert_records(ch, "triplets", trajectories())


def _transition(prompt: list[int], response: list[int], reward: Optional[float], version: int, index: int,
                logprobs: Optional[list[float]] = None, **own: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "input": {"text": None, "token_ids": prompt},
        "output": {"text": None, "token_ids": response},
        "reward": reward,
        "metadata": {**own, "triplet_index": index, "policy_version": version, "logprobs": logprobs},
    }


def _metadata(rollout_id: str, attempt_id: str, created: float, **fields: Any) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id, "attempt_id": attempt_id, "attempt_sequence_id": 1, "mode": None, "status": "succeeded",
        "attempt_status": "succeeded", "decision": "final", "final_reward": None, "group_id": None, "resources_id": None,
        "policy_version": None, "adapter": ADAPTER, "span_count": 0, "finished_at": created - 0.5, "created_at": created,
        "task": None, "rollout_metadata": None, "trajectory_metadata": {}, **fields,
    }  # fmt: skip


#: the S3 JSON of each exported trajectory, by rollout id (live rows)
EXPECTED: dict[str, dict[str, Any]] = {
    "ro-alpha": {
        "trajectory_id": "ro-alpha",
        "transitions": [
            _transition([1, 2, 3], [4, 5], None, 3, 0, [-0.5, -0.25], response_id="r-1", agent_name="solver"),
            _transition([1, 2, 3, 4, 5, 6], [7], 0.25, 3, 1, response_id="r-2", agent_name="solver"),
            _transition([1, 2, 3, 4, 5, 6, 7], [8, 9], 1.0, 4, 2, response_id="r-3", agent_name="checker"),
        ],
        "total_reward": 1.25,
        "metadata": _metadata(
            "ro-alpha", "at-2", T0 + 10, attempt_sequence_id=2, mode="train", final_reward=1.0, group_id="g-1",
            resources_id="rs-1", policy_version=3, span_count=9, task=ALPHA_TASK, rollout_metadata={"group_id": "g-1"},
            trajectory_metadata={"rollout_metadata": {"group_id": "g-1"}},
        ),  # fmt: skip
    },
    "ro-beta": {
        "trajectory_id": "ro-beta",
        "transitions": [_transition([1, 2], [6], 0.0, 4, 0), _transition([1, 2, 6], [7, 8], None, 4, 1)],
        "total_reward": 0.0,
        "metadata": _metadata("ro-beta", "at-3", T0 + 20, mode="val", final_reward=0.0, policy_version=4, span_count=6,
                              task={"q": 2}, rollout_metadata={}),  # fmt: skip
    },
    "ro-gamma": {
        "trajectory_id": "ro-gamma",
        "transitions": [_transition([3], [4], None, 5, 0)],
        "total_reward": None,
        "metadata": _metadata("ro-gamma", "at-4", T0 + 30, mode="test", policy_version=5, span_count=3),
    },
}
