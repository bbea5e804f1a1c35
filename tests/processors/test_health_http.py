"""The processors' HTTP health endpoint answers probes from the live service report."""

from __future__ import annotations

import asyncio

import httpx

from agl_stream_processors.health_http import HealthServer


async def test_health_endpoint_reflects_app_status() -> None:
    report = {"apps": {"sinks": {"status": "running"}}}
    server = await HealthServer(lambda: report, "127.0.0.1", 0).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            ok = await client.get("/health")
            assert ok.status_code == 200 and ok.json()["apps"]["sinks"]["status"] == "running"
            report["apps"]["sinks"]["status"] = "failed"
            assert (await client.get("/health")).status_code == 503
            assert (await client.get("/nope")).status_code == 404
            # a client that connects and says nothing does not wedge the server
            _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.close()
            assert (await client.get("/health")).status_code == 503
    finally:
        await server.stop()
