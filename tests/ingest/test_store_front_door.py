"""The store front door against upstream's own store client (agentlightning 0.3.0 in its side venv).

The pipeline runs in this process (state machine, triplet processor, ClickHouse sinks) and the
front door is served on a real socket over a real broker; ``upstream_store_contract.py`` then drives
every route of upstream's ``LightningStoreServer`` with upstream's ``LightningStoreClient`` and
upstream's OTLP exporter, from the side venv, and reports what differed from upstream's behaviour.
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest

from agl_stream.config import Settings
from agl_stream_ingest.store.app import create_app
from tests.agl_stream.client.pipeline import processors
from tests.upstream_venv import UPSTREAM_ENV, upstream_python

pytestmark = pytest.mark.integration
CONTRACT = Path(__file__).with_name("upstream_store_contract.py")


@asynccontextmanager
async def front_door(settings: Settings) -> AsyncIterator[str]:
    """The front door app served on a free loopback port; yields its URL."""
    from agl_stream.service import HttpHost

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        server = await HttpHost(app, name="store-front-door").start()
        try:
            yield server.url
        finally:
            await server.stop()


async def test_upstream_store_client_over_every_route(topics: Settings) -> None:
    python = upstream_python()
    async with processors(topics), front_door(topics) as url:
        proc = await asyncio.create_subprocess_exec(
            str(python), str(CONTRACT), url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **UPSTREAM_ENV},
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, err.decode()[-4000:]
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["error"] is None, report["error"] + err.decode()[-3000:]
    assert report["failures"] == {}, json.dumps(report["failures"], indent=1)
    # every route of upstream's server was exercised (and answered as upstream's)
    assert len(report["routes"]) >= 30, report["routes"]  # upstream 0.3.0 has 32 /v1 routes
    assert sorted(report["exercised"]) == sorted(report["routes"])
