"""OTLP/HTTP trace receiver: ``POST /v1/traces`` -> ``agl.spans``.

Accepts ``application/x-protobuf`` and ``application/json`` export requests (gzip or identity),
answers in the request's encoding as the OTLP/HTTP spec asks: 200 with an
``ExportTraceServiceResponse`` (``partial_success`` counting the spans refused and why), 400/413/415
with a ``google.rpc.Status`` carrying the reason, 503 with ``Retry-After`` when the broker did not
acknowledge in time (OTLP exporters retry that). 200 is sent only after the broker acknowledged
every accepted span.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional

from fastapi import FastAPI, HTTPException, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.responses import JSONResponse
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agl_stream.config import Settings
from agl_stream.types import Span
from agl_stream_ingest.http import add_operations, read_body_within
from agl_stream_ingest.metrics import SPANS_REJECTED
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.stopping import stop_with_manager
from agl_stream_ingest.otlp.decode import OtlpDecodeError, Rejection, parse_json, parse_protobuf, to_spans
from agl_stream_ingest.publisher import PublishError, RecordTooLarge, SpanPublisher
from agl_stream_ingest.security import check_token, decode_content_encoding
from agl_stream_ingest.sequence import SequenceAllocator

logger = logging.getLogger(__name__)

SERVER = "otlp"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_REASONS_IN_RESPONSE = 5


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def status_response(request: Request, code: int, message: str, headers: Optional[dict[str, str]] = None) -> Response:
    """An error in the encoding the client spoke (google.rpc.Status), JSON when it spoke neither."""
    status = status_pb2.Status(code=code, message=message)
    if _media_type(request) == PROTOBUF:
        return Response(status.SerializeToString(), status_code=code, media_type=PROTOBUF, headers=headers)
    return JSONResponse({"code": code, "message": message}, status_code=code, headers=headers)


def _export_response(request: Request, rejected: list[Rejection]) -> Response:
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = len(rejected)
        reasons = "; ".join(r.reason for r in rejected[:MAX_REASONS_IN_RESPONSE])
        more = f" (+{len(rejected) - MAX_REASONS_IN_RESPONSE} more)" if len(rejected) > MAX_REASONS_IN_RESPONSE else ""
        response.partial_success.error_message = f"{len(rejected)} span(s) rejected: {reasons}{more}"
    if _media_type(request) == PROTOBUF:
        return Response(response.SerializeToString(), media_type=PROTOBUF)
    return Response(json_format.MessageToJson(response, indent=None), media_type=JSON)


def create_app(
    settings: Settings,
    options: Optional[IngestOptions] = None,
    publisher: Optional[SpanPublisher] = None,
) -> FastAPI:
    """The receiver app; its lifespan starts the producer and flushes it on shutdown."""
    options = options or IngestOptions()
    publisher = publisher or SpanPublisher(settings, SERVER, timeout=options.produce_timeout)
    allocator = SequenceAllocator()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await publisher.start()
        logger.info("OTLP receiver producing to %s", publisher.topic)
        try:
            yield
        finally:
            await publisher.stop()

    app = FastAPI(title="agl-stream OTLP/HTTP trace receiver", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.publisher = publisher
    add_operations(app, SERVER)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code >= 500:
            logger.error("OTLP export failed: %s", exc.detail)
        else:
            logger.warning("OTLP export refused (%d): %s", exc.status_code, exc.detail)
        return status_response(request, exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.post("/v1/traces")
    async def export_traces(request: Request) -> Response:
        response, _accepted = await export(request, options, publisher, allocator)
        return response

    return app


async def export(
    request: Request, options: IngestOptions, publisher: SpanPublisher, allocator: SequenceAllocator
) -> tuple[Response, list[Span]]:
    """Handle one ``POST /v1/traces``: the OTLP response and the spans the broker acknowledged.

    Shared with the store front door, which serves the same route on upstream's store address."""
    check_token(request, options.token)
    media_type = _media_type(request)
    if media_type not in (PROTOBUF, JSON):
        raise HTTPException(415, f"unsupported Content-Type {media_type or '<none>'!r}: use {PROTOBUF} or {JSON}")
    body = await read_body_within(request, options.max_body_bytes, options.request_timeout)
    body = decode_content_encoding(body, request.headers.get("content-encoding"), options.max_body_bytes)
    try:
        export_request = parse_protobuf(body) if media_type == PROTOBUF else parse_json(body)
    except OtlpDecodeError as exc:
        raise HTTPException(400, str(exc)) from None

    decoded = to_spans(export_request, allocator)
    rejected = list(decoded.rejected)
    records: list[tuple[str, bytes]] = []
    accepted: list[Span] = []
    for span in decoded.spans:
        try:
            records.append((span.rollout_id, publisher.encode(span)))
            accepted.append(span)
        except RecordTooLarge as exc:
            rejected.append(Rejection(span_id=span.span_id, name=span.name, code="too_large", reason=str(exc)))
    try:
        await publisher.publish(records)
    except PublishError as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
    for rejection in rejected:
        SPANS_REJECTED.labels(publisher.server, rejection.code).inc()
    if rejected:
        logger.warning("rejected %d of %d span(s): %s", len(rejected), len(rejected) + len(records), rejected[0].reason)
    return _export_response(request, rejected), accepted


def app_from_env() -> FastAPI:
    """uvicorn factory: every worker process builds its app from ``AGL_*`` variables."""
    stop_with_manager()
    settings = Settings.from_env()
    return create_app(settings, IngestOptions.from_settings(settings))
