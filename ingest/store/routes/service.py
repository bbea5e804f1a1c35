"""The service's own routes under ``/v1/agl``: health (upstream's clients probe it) and statistics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from agl_stream_ingest.store.state import FrontDoor, front_door
from agl_stream.service import add_health_routes, always_healthy

router = APIRouter()
add_health_routes(router, always_healthy())


@router.get("/statistics")
async def statistics(door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return dict(await door.store.statistics())
