"""Pieces both ingest apps share: health and metrics routes, request counting, body timeouts."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from fastapi import FastAPI, HTTPException, Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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

    app.add_middleware(RequestCounter, server=server)


class RequestCounter:
    """Counts every answered request by route template and status, and observes its latency.

    A plain ASGI middleware rather than ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware runs each
    request's app in a task of its own and streams its body through memory channels, about a fifth of the store
    front door's CPU per request on upstream's benchmark (docs/performance.md)."""

    def __init__(self, app: ASGIApp, server: str) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees when the app raises before answering (Starlette's error middleware)

        async def send_counting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        finally:
            # The router writes the matched route into the scope; its template keeps rollout ids out of the labels.
            template = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(self.server, template, str(status)).inc()
            REQUEST_LATENCY.labels(self.server, template).observe(time.perf_counter() - started)


async def read_body_within(request: Request, limit: int, timeout: float) -> bytes:
    """Read the body (size-capped) and answer 408 if the client does not send it in time."""
    try:
        async with asyncio.timeout(timeout):
            return await read_body(request, limit)
    except TimeoutError:
        raise HTTPException(408, f"request body not received within {timeout:g}s") from None
