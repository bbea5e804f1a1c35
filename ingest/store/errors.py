"""The front door's error answers, in upstream's shapes: ``{"detail": ...}`` for HTTP errors (``google.rpc.Status``
on ``/v1/traces``), 400 with ``error_type`` for what the stream refuses or cannot find, 503 with ``Retry-After`` when
the pipeline is behind or the broker did not acknowledge, 500 for anything else."""

from __future__ import annotations

import logging
from typing import Optional

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agl_stream.client import ConsistencyTimeout, SpanReaderUnavailable, UnsupportedOnStream
from agl_stream_ingest.otlp import app as otlp
from agl_stream_ingest.publisher import PublishError

logger = logging.getLogger(__name__)


def error(status: int, detail: str, error_type: str, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "error_type": error_type}, status_code=status, headers=headers)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    headers = getattr(exc, "headers", None)
    if request.url.path == "/v1/traces":  # OTLP clients expect google.rpc.Status
        return otlp.status_response(request, exc.status_code, str(exc.detail), headers=headers)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


async def _unsupported(_request: Request, exc: UnsupportedOnStream) -> Response:
    return error(400, str(exc), "UnsupportedOnStream")


async def _refused(_request: Request, exc: ValueError) -> Response:
    return error(400, str(exc), type(exc).__name__)


async def _behind(_request: Request, exc: ConsistencyTimeout) -> Response:
    logger.warning("pipeline did not catch up: %s", exc)
    return error(503, str(exc), "ConsistencyTimeout", headers={"Retry-After": "1"})


async def _no_reader(_request: Request, exc: SpanReaderUnavailable) -> Response:
    logger.error("%s", exc)
    return error(503, str(exc), "SpanReaderUnavailable", headers={"Retry-After": "5"})


async def _broker_down(_request: Request, exc: PublishError) -> Response:
    return error(503, str(exc), "PublishError", headers={"Retry-After": "1"})


async def _crashed(_request: Request, exc: Exception) -> Response:
    logger.exception("store front door request failed")
    return error(500, "Internal server error", type(exc).__name__)


def add_error_handlers(app: FastAPI) -> None:
    for kind, handler in ((StarletteHTTPException, _http_error), (UnsupportedOnStream, _unsupported),
                          (ValueError, _refused), (ConsistencyTimeout, _behind), (SpanReaderUnavailable, _no_reader),
                          (PublishError, _broker_down), (Exception, _crashed)):  # fmt: skip
        app.add_exception_handler(kind, handler)  # type: ignore[arg-type]
