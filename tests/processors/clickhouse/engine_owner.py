"""A process that owns an embedded ClickHouse (as the sinks do during a run), with or without its SQL door.

``python -m tests.processors.clickhouse.engine_owner DSN [--door]``: migrates and fills the store
with :func:`tests.processors.clickhouse.store.populate`, optionally serves the SQL door, prints
``ready`` and holds the engine until stdin closes.
"""

from __future__ import annotations

import asyncio
import sys

from agl_stream_processors.clickhouse import connect, migrate
from tests.processors.clickhouse.store import populate


async def main(dsn: str, door: bool) -> None:
    ch = connect(dsn)
    migrate(ch)
    populate(ch)
    sql_door = None
    if door:
        from agl_stream_processors.clickhouse.door import SqlDoor

        sql_door = await SqlDoor(ch.target).start()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the test closes our stdin
    if sql_door is not None:
        await sql_door.stop()
    ch.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "--door" in sys.argv[2:]))
