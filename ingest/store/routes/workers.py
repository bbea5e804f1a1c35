"""Workers: query, read, heartbeat."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends

from agl_stream_ingest.store.state import FrontDoor, front_door
from agl_stream.types import Worker
from agl_stream_ingest.store.wire import UpdateWorkerBody, WorkerQuery, as_json, check_page, page_json, set_or_unset

router = APIRouter()


async def _query(door: FrontDoor, q: WorkerQuery, fields_set: Optional[set[str]] = None) -> dict[str, Any]:
    check_page(q, Worker)
    status_in = q.status_in if fields_set is None or "status_in" in fields_set else None
    result = await door.store.query_workers(status_in=status_in, worker_id_contains=q.worker_id_contains,
                                            filter_logic=q.filter_logic, sort_by=q.sort_by, sort_order=q.sort_order,
                                            limit=q.limit, offset=q.offset)  # fmt: skip
    return page_json(result)


@router.get("/workers")
async def query_workers(q: WorkerQuery = Depends(), door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, q)


@router.post("/workers/search")
async def search_workers(q: WorkerQuery, door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, q, q.model_fields_set)


@router.get("/workers/{worker_id}")
async def get_worker(worker_id: str, door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.get_worker_by_id(worker_id))


@router.post("/workers/{worker_id}")
async def update_worker(worker_id: str, body: Optional[UpdateWorkerBody] = Body(None), door: FrontDoor = Depends(front_door)) -> Any:
    stats = set_or_unset(body, "heartbeat_stats", nullable=False)
    return as_json(await door.store.update_worker(worker_id, heartbeat_stats=stats))
