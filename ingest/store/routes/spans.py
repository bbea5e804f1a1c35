"""Spans: add one (published to ``agl.spans`` and noted in the ledger), query, and the next sequence id."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from agl_stream_ingest.store.state import FrontDoor, front_door
from agl_stream.types import Span
from agl_stream_ingest.publisher import RecordTooLarge
from agl_stream_ingest.store.wire import SequenceIdBody, SpanQueryBody, as_json, check_page, page_json

router = APIRouter()


@router.post("/spans", status_code=201)
async def add_span(span: Span, door: FrontDoor = Depends(front_door)) -> Any:
    await door.known(span.rollout_id, span.attempt_id)
    if not door.ledger.is_new(span):
        return None  # upstream answers null for a span it did not add
    try:
        payload = door.publisher.encode(span)
    except RecordTooLarge as exc:
        raise ValueError(str(exc)) from None
    await door.publisher.publish([(span.rollout_id, payload)])
    door.allocator.observe(span.rollout_id, span.attempt_id, span.sequence_id)
    door.ledger.accepted([span])
    return as_json(span)


async def _query(door: FrontDoor, q: SpanQueryBody) -> dict[str, Any]:
    check_page(q, Span)
    try:
        result = await door.store.query_spans(q.rollout_id, q.attempt_id, **q.filters())
    finally:
        door.count_span_reads()
    return page_json(result)


@router.get("/spans")
async def query_spans(q: SpanQueryBody = Depends(), door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, q)


@router.post("/spans/search")
async def search_spans(q: SpanQueryBody, door: FrontDoor = Depends(front_door)) -> dict[str, Any]:
    return await _query(door, q)


@router.post("/spans/next")
async def next_sequence_id(body: SequenceIdBody, door: FrontDoor = Depends(front_door)) -> dict[str, int]:
    return {"sequence_id": door.allocator.next(body.rollout_id, body.attempt_id)}
