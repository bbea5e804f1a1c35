"""Pieces both ingest apps share: health and metrics routes, request counting, body timeouts."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Optional

from fastapi import FastAPI, HTTPException, Request, Response

from agl_stream.service import HealthCheck, add_health_routes, always_healthy

from agl_stream_ingest.metrics import REQUEST_LATENCY, REQUESTS, metrics_response
from agl_stream_ingest.security import read_body

logger = logging.getLogger(__name__)


def add_operations(app: FastAPI, server: str, health: Optional[HealthCheck] = None) -> None:
    """``/health`` (``health``, or healthy whenever it answers), ``/metrics`` and a counter of every answered
    request by route template.

    Both routes are open (no token): they carry no span data, and probes and scrapers rarely
    hold application secrets. Bind to 127.0.0.1 or firewall the port when that matters.
    """

    add_health_routes(app, health or always_healthy(server=server))

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return metrics_response()

    @app.middleware("http")
    async def count_requests(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        # The route template (not the raw path) keeps rollout ids out of the label values.
        template = getattr(route, "path", "unmatched")
        REQUESTS.labels(server, template, str(response.status_code)).inc()
        REQUEST_LATENCY.labels(server, template).observe(time.perf_counter() - started)
        return response


async def read_body_within(request: Request, limit: int, timeout: float) -> bytes:
    """Read the body (size-capped) and answer 408 if the client does not send it in time."""
    try:
        async with asyncio.timeout(timeout):
            return await read_body(request, limit)
    except TimeoutError:
        raise HTTPException(408, f"request body not received within {timeout:g}s") from None
