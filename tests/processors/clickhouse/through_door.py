"""The SQL door of a test's embedded store, served in this process: reads over HTTP, as another local process's.

Why: the door is the third transport a reader meets (besides ``chdb://`` and a server's ``http(s)://``),
and the strictest about request size: it reads the SQL from the request body or the ``query``
parameter and bind parameters from the URL only, not from a multipart form.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.clickhouse.door import SqlDoor


@asynccontextmanager
async def door_dsn(ch: ClickHouse) -> AsyncIterator[str]:
    """The ``http://`` DSN of a read-only door into the engine ``ch`` holds (an embedded one)."""
    door = await SqlDoor(ch.target).start()
    try:
        assert door.address is not None
        yield door.address.dsn(ch.database)
    finally:
        await door.stop()
