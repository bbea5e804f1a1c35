"""OTLP at the front door, as upstream's store serves it: ``/v1/traces`` (spans to ``agl.spans``, noted in the
ledger), and 501 for the other signals."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from agl_stream_ingest.otlp import app as otlp
from agl_stream_ingest.store.state import FrontDoor, front_door

router = APIRouter()


@router.post("/v1/traces")
async def export_traces(request: Request, door: FrontDoor = Depends(front_door)) -> Response:
    response, accepted = await otlp.export(request, door.options, door.publisher, door.allocator)
    door.ledger.accepted(accepted)
    return response


@router.post("/v1/metrics")
@router.post("/v1/logs")
@router.post("/v1/development/profiles")
async def not_implemented() -> Response:
    return Response(status_code=501)  # upstream's answer for the other OTLP signals
