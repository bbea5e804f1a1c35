"""A minimal HTTP health endpoint for the processors service (Kubernetes / compose probes).

``GET /health`` answers 200 with the service's health report while every app runs, 503 when one
failed; anything else is 404. Plain asyncio streams: no web framework needed for one route.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

logger = logging.getLogger(__name__)


class HealthServer:
    def __init__(self, report: Callable[[], dict[str, Any]], host: str = "0.0.0.0", port: int = 8081) -> None:
        self.report = report
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> "HealthServer":
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("health endpoint on http://%s:%d/health", self.host, self.port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await asyncio.wait_for(reader.readline(), 5)).decode("latin-1").split()
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass  # headers are not needed
            if len(request_line) >= 2 and request_line[0] == "GET" and request_line[1].split("?")[0] == "/health":
                report = self.report()
                healthy = all(app.get("status") == "running" for app in report.get("apps", {}).values())
                status, body = ("200 OK" if healthy else "503 Service Unavailable"), json.dumps(report, default=str)
            else:
                status, body = "404 Not Found", json.dumps({"error": "only GET /health is served"})
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                f"Connection: close\r\n\r\n".encode() + payload
            )
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError) as exc:
            logger.debug("health request aborted: %r", exc)
        finally:
            writer.close()
