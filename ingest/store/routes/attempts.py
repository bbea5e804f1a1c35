"""Attempts of a rollout: start one, query, the latest, and updates (a finished attempt carries the span count and
final reward this replica saw, from its ledger)."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends

from agl_stream_ingest.store.state import FrontDoor, front_door
from agl_stream.client import UNSET, Unset
from agl_stream.types import Attempt
from agl_stream_ingest.store.wire import AttemptQuery, UpdateAttemptBody, WorkerIdBody, as_json, check_page, page_json, set_or_unset

router = APIRouter()


@router.post("/rollouts/{rollout_id}/attempts", status_code=201)
async def start_attempt(rollout_id: str, body: Optional[WorkerIdBody] = Body(None), door: FrontDoor = Depends(front_door)) -> Any:
    await door.known(rollout_id)
    task = await door.store.start_attempt(rollout_id, worker_id=body.worker_id if body else None)
    door.ledger.hand_out(task.rollout_id, task.attempt.attempt_id)
    return as_json(task)


async def _query(door: FrontDoor, rollout_id: str, q: AttemptQuery) -> dict[str, Any]:
    check_page(q, Attempt)
    result = await door.store.query_attempts(rollout_id, sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit,
                                             offset=q.offset)  # fmt: skip
    return page_json(result)


@router.get("/rollouts/{rollout_id}/attempts")
async def query_attempts(rollout_id: str, q: AttemptQuery = Depends(), door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, rollout_id, q)


@router.post("/rollouts/{rollout_id}/attempts/search")
async def search_attempts(rollout_id: str, q: AttemptQuery, door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, rollout_id, q)


@router.get("/rollouts/{rollout_id}/attempts/latest")
async def latest_attempt(rollout_id: str, door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.get_latest_attempt(rollout_id))


@router.post("/rollouts/{rollout_id}/attempts/{attempt_id}")
async def update_attempt(rollout_id: str, attempt_id: str, body: UpdateAttemptBody = Body(...),
                         door: FrontDoor = Depends(front_door)) -> Any:  # fmt: skip
    await door.known(rollout_id, attempt_id)
    status = set_or_unset(body, "status", nullable=False)
    metadata = set_or_unset(body, "metadata", nullable=False)
    count: Any = UNSET
    if status in ("succeeded", "failed"):
        resolved = attempt_id
        if attempt_id == "latest" and (latest := await door.store.get_latest_attempt(rollout_id)) is not None:
            resolved = latest.attempt_id
        finished = door.ledger.finish(rollout_id, resolved)
        if not door.span_counts:
            finished = None
        count = finished.span_count if finished is not None else None
        if finished is not None and finished.final_reward is not None:
            # upstream's runners report no reward: the final one of the spans seen here rides on
            # the finished event (the state machine does not keep it on the attempt)
            metadata = {**({} if isinstance(metadata, Unset) else metadata), **finished.event_metadata()}
    attempt = await door.store.update_attempt(
        rollout_id, attempt_id, status=status, worker_id=set_or_unset(body, "worker_id", nullable=False),
        last_heartbeat_time=set_or_unset(body, "last_heartbeat_time", nullable=False),
        metadata=metadata, span_count=count,
    )  # fmt: skip
    return as_json(attempt)
