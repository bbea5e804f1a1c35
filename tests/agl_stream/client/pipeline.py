"""The whole processors service in the test process, so the test can also read the embedded ClickHouse it owns.

State machine, triplet processor and ClickHouse sinks run as in ``agl-stream processors``; the
store client reads spans with a :class:`ClickHouseSpanReader` on the same data directory (the
embedded engine allows one owning process: this one).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from agl_stream.client import StoreClient
from agl_stream.client.clickhouse_reader import ClickHouseSpanReader
from agl_stream.config import Settings


@asynccontextmanager
async def processors(settings: Settings) -> AsyncIterator[object]:
    from agl_stream_processors.service import ProcessorService

    service = ProcessorService(settings, options={"grace_seconds": 5.0, "scan_interval": 0.2}, health_interval=1.0)
    stop = asyncio.Event()
    run = asyncio.create_task(service.run(stop))
    try:
        yield service
    finally:
        stop.set()
        assert await asyncio.wait_for(run, 60) == 0, service.health()


@asynccontextmanager
async def store_with_pipeline(settings: Settings, **client_options: object) -> AsyncIterator[StoreClient]:
    """A started StoreClient over running processors whose ClickHouse it reads."""
    async with processors(settings):
        reader = ClickHouseSpanReader(settings.effective_clickhouse_dsn)
        async with StoreClient(settings, span_reader=reader, **client_options) as store:  # type: ignore[arg-type]
            try:
                yield store
            finally:
                await reader.close()
