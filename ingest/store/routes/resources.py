"""Resources: query, add, the latest, update, read."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from agl_stream_ingest.store.state import FrontDoor, front_door
from agl_stream.types import NamedResources, ResourcesUpdate
from agl_stream_ingest.store.wire import ResourcesQuery, as_json, check_page, page_json

router = APIRouter()


@router.get("/resources")
async def query_resources(q: ResourcesQuery = Depends(), door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    check_page(q, ResourcesUpdate)
    result = await door.store.query_resources(resources_id=q.resources_id, resources_id_contains=q.resources_id_contains,
                                              sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit, offset=q.offset)  # fmt: skip
    return page_json(result)


@router.post("/resources", status_code=201)
async def add_resources(resources: NamedResources, door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.add_resources(resources))


@router.get("/resources/latest")
async def latest_resources(door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.get_latest_resources())


@router.post("/resources/{resources_id}")
async def update_resources(resources_id: str, resources: NamedResources, door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.update_resources(resources_id, resources))


@router.get("/resources/{resources_id}")
async def get_resources(resources_id: str, door: FrontDoor = Depends(front_door)) -> Any:
    return as_json(await door.store.get_resources_by_id(resources_id))
