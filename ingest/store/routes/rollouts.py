"""Rollouts and the queue: enqueue, dequeue, start, query, read, update, and the wait for outcomes."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends

from agl_stream_ingest.store.state import FrontDoor, front_door
from agl_stream_ingest.store.wire import (
    DequeueBody,
    EnqueueBody,
    RolloutQuery,
    StartRolloutBody,
    UpdateRolloutBody,
    WaitBody,
    as_json,
    check_page,
    page_json,
    set_or_unset,
)
from agl_stream.types import Rollout

router = APIRouter()


@router.post("/queues/rollouts/enqueue", status_code=201)
async def enqueue(body: EnqueueBody, door: FrontDoor = Depends(front_door)) -> list[Any]:
    rollouts = await door.store.enqueue_many_rollouts([r.request() for r in body.rollouts]) if body.rollouts else []
    return [as_json(r) for r in rollouts]


@router.post("/queues/rollouts/dequeue")
async def dequeue(body: Optional[DequeueBody] = Body(None), door: FrontDoor = Depends(front_door)) -> list[Any]:
    body = body or DequeueBody()
    if body.limit <= 0:
        return []
    claimed = await door.store.dequeue_many_rollouts(limit=body.limit, worker_id=body.worker_id)
    for task in claimed:
        door.ledger.hand_out(task.rollout_id, task.attempt.attempt_id)
    return [as_json(t) for t in claimed]


@router.post("/rollouts", status_code=201)
async def start_rollout(body: StartRolloutBody, door: FrontDoor = Depends(front_door)) -> Any:
    task = await door.store.start_rollout(input=body.input, mode=body.mode, resources_id=body.resources_id,
                                          config=body.config, metadata=body.metadata, worker_id=body.worker_id)  # fmt: skip
    door.ledger.hand_out(task.rollout_id, task.attempt.attempt_id)
    return as_json(task)


async def _query(door: FrontDoor, q: RolloutQuery, fields_set: Optional[set[str]] = None) -> dict[str, Any]:
    check_page(q, Rollout)
    # In a search body, a list the client did not send is "no filter" (upstream's rule).
    status_in = q.status_in if fields_set is None or "status_in" in fields_set else None
    rollout_id_in = q.rollout_id_in if fields_set is None or "rollout_id_in" in fields_set else None
    result = await door.store.query_rollouts(status_in=status_in, rollout_id_in=rollout_id_in,
                                             rollout_id_contains=q.rollout_id_contains, filter_logic=q.filter_logic,
                                             sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit, offset=q.offset)  # fmt: skip
    return page_json(result)


@router.get("/rollouts")
async def query_rollouts(q: RolloutQuery = Depends(), door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, q)


@router.post("/rollouts/search")
async def search_rollouts(q: RolloutQuery, door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, q, q.model_fields_set)


@router.get("/rollouts/{rollout_id}")
async def get_rollout(rollout_id: str, door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.get_rollout_by_id(rollout_id))


@router.post("/rollouts/{rollout_id}")
async def update_rollout(rollout_id: str, body: UpdateRolloutBody = Body(...), door: FrontDoor = Depends(front_door)) -> Any:
    await door.known(rollout_id)
    rollout = await door.store.update_rollout(
        rollout_id, input=set_or_unset(body, "input"), mode=set_or_unset(body, "mode"),
        resources_id=set_or_unset(body, "resources_id"), status=set_or_unset(body, "status", nullable=False),
        config=set_or_unset(body, "config", nullable=False), metadata=set_or_unset(body, "metadata"),
    )  # fmt: skip
    return as_json(rollout)


@router.post("/waits/rollouts")
async def wait_for_rollouts(body: WaitBody, door: FrontDoor = Depends(front_door)) -> list[Any]:
    done = await door.store.wait_for_rollouts(rollout_ids=body.rollout_ids, timeout=body.timeout)
    return [as_json(r) for r in done]
