"""A sink whose inserts hit the embedded engine's memory limit loses nothing: it retries, commits nothing
meanwhile, says which setting moves the limit, and writes every record once the engine has room again.

Why: the engine now starts with a memory limit (``agl_stream_processors.clickhouse.engine``), so
MEMORY_LIMIT_EXCEEDED is an error a long run can meet; it must take the sink's ordinary retry path.
"""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest

from agl_stream.config import Settings
from agl_stream_processors.clickhouse import ClickHouse, connect, migrate
from agl_stream_processors.sinks import SinkOptions, SinkService
from tests.processors.sinks.test_sink_faults import _committed, _produce_spans

pytestmark = pytest.mark.integration


@pytest.fixture
def ch(settings: Settings) -> Iterator[ClickHouse]:
    client = connect(settings.effective_clickhouse_dsn, create_database=True)
    migrate(client)
    try:
        yield client
    finally:
        client.close()


async def test_a_memory_limit_hit_is_retried_and_loses_nothing(topics: Settings, ch: ClickHouse) -> None:
    settings = topics
    stop = asyncio.Event()
    service = SinkService(settings, ["spans"], ch=ch, options=SinkOptions(batch_size=50, max_wait=0.1,
                          retry_initial=0.05, retry_max=0.2), apply_migrations=False)  # fmt: skip
    task = asyncio.create_task(service.run(stop))
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while not (service.sinks and service.sinks[0].stats.ready):  # started: the schema check is done
            assert asyncio.get_running_loop().time() < deadline and not task.done(), "the sink did not start"
            await asyncio.sleep(0.05)
        ch.raw.set_client_setting("max_memory_usage", "1")  # every insert of this client is over its limit
        await _produce_spans(settings, 120)
        while not (service.sinks and service.sinks[0].stats.retries >= 3):
            assert asyncio.get_running_loop().time() < deadline, "the sink never retried"
            await asyncio.sleep(0.05)
        stats = service.sinks[0].stats
        error = stats.last_error or ""
        assert "MEMORY_LIMIT_EXCEEDED" in error and "AGL_CLICKHOUSE_ENGINE_SETTINGS" in error  # which setting moves it
        assert stats.records == 0 and await _committed(settings, "agl-sink-spans") == 0

        ch.raw.set_client_setting("max_memory_usage", "0")  # room again: the retried batch and the rest go in
        while stats.records < 120:
            assert asyncio.get_running_loop().time() < deadline + 20, f"only {stats.records} of 120 records written"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    assert ch.scalar("SELECT count() FROM spans FINAL") == 120
    assert stats.last_error is None and await _committed(settings, "agl-sink-spans") == 120
