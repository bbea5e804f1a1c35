"""Run several sinks in one process, on one event loop, sharing one ClickHouse client.

Why one process: the embedded engine (``chdb:///dir``) allows one owning process per data
directory, so in local mode every sink must live in the process that opened it. With an HTTP DSN
the same code runs any subset of sinks per process (``names``) and scales out by starting more
processes: each sink's consumer group spreads partitions over them.

``run_sinks`` applies pending migrations first with the embedded engine (on a server it only checks
that the schema is current, since the migrator job owns DDL; ``apply_migrations`` overrides), starts
one shared DLQ producer, runs every selected sink until ``stop`` is set, and returns each sink's
statistics. With the embedded engine and ``door`` options it also serves the engine's SQL door
(:mod:`agl_stream_processors.clickhouse.door`): the one way other local processes can read the
engine while the sinks own it. With ``idle_exit`` it also stops by itself once every sink has been assigned partitions,
has fetched up to their high watermarks, has nothing pending and has seen no record for that many
seconds (drain mode, for batch jobs and tests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Optional, Sequence

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream_processors.clickhouse.client import ClickHouse, connect
from agl_stream_processors.clickhouse.door_file import DoorOptions
from agl_stream_processors.clickhouse.engine import engine_settings
from agl_stream_processors.clickhouse.migrations import migrate, require_current
from agl_stream_processors.sinks.sink import Sink, SinkOptions, SinkStats
from agl_stream_processors.sinks.specs import resolve

logger = logging.getLogger(__name__)

HealthCallback = Callable[[dict[str, SinkStats]], None]


class SinkService:
    """The selected sinks plus what they share (client, DLQ producer); a named app for ``agl-stream processors``."""

    name = "sinks"

    def __init__(
        self,
        settings: Settings,
        names: Optional[Sequence[str]] = None,
        *,
        ch: Optional[ClickHouse] = None,
        options: SinkOptions = SinkOptions(),
        apply_migrations: Optional[bool] = None,
        door: Optional[DoorOptions] = None,
    ) -> None:
        """``door``: serve read-only SQL into the embedded engine while the sinks own it (ignored for a server DSN)."""
        self.settings = settings
        self.specs = resolve(list(names) if names else None)
        self.options = options
        self.apply_migrations = apply_migrations
        self.door_options = door
        self.door: Optional[Any] = None
        self._ch = ch
        self._owns_client = ch is None
        self.sinks: list[Sink] = []

    def health(self) -> dict[str, dict[str, object]]:
        return {sink.name: sink.stats.as_dict() for sink in self.sinks}

    def idle_for(self) -> Optional[float]:
        """Seconds since the last record of any sink, once all are assigned, caught up and written; else ``None``."""
        if not self.sinks or not all(s.stats.ready and s.stats.caught_up and s.stats.pending == 0 for s in self.sinks):
            return None
        return time.monotonic() - max(s.stats.last_record_at for s in self.sinks)

    async def run(
        self,
        stop: asyncio.Event,
        *,
        idle_exit: Optional[float] = None,
        on_health: Optional[HealthCallback] = None,
        health_interval: float = 10.0,
    ) -> dict[str, SinkStats]:
        ch = self._ch or await asyncio.to_thread(
            connect, self.settings.effective_clickhouse_dsn, engine_settings=engine_settings(self.settings)
        )  # the embedded engine starts with this service's memory limits (engine.py); a server ignores them
        try:
            migrate_now = ch.target.embedded if self.apply_migrations is None else self.apply_migrations
            if migrate_now:
                for m in await asyncio.to_thread(migrate, ch):
                    logger.info("applied migration %04d_%s", m.version, m.name)
            else:  # a server: the migrator job owns DDL; refuse to write into an outdated schema
                await asyncio.to_thread(require_current, ch)
            if self.door_options is not None and ch.target.embedded:
                self.door = await self._open_door(ch)
            async with RecordProducer(self.settings) as dlq:
                self.sinks = [Sink(spec, self.settings, ch, dlq, self.options) for spec in self.specs]
                tasks = [asyncio.create_task(s.run(stop), name=f"sink-{s.name}") for s in self.sinks]
                watcher = asyncio.create_task(self._watch(stop, tasks, idle_exit, on_health, health_interval))
                try:
                    await asyncio.gather(*tasks)
                finally:
                    stop.set()
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
            return {s.name: s.stats for s in self.sinks}
        finally:
            if self.door is not None:
                await self.door.stop()
                self.door = None
            if self._owns_client:
                await asyncio.to_thread(ch.close)

    async def _open_door(self, ch: ClickHouse) -> Optional[Any]:
        """The SQL door, or ``None`` (logged as an error): the sinks' job is writing, and they go on without it."""
        try:
            from agl_stream_processors.clickhouse.door import SqlDoor  # fastapi/uvicorn: only when a door is asked for

            return await SqlDoor(ch.target, self.door_options or DoorOptions()).start()
        except Exception as exc:
            logger.error("SQL door not opened (local commands cannot read the engine while the sinks run): %r", exc)
            return None

    async def _watch(
        self,
        stop: asyncio.Event,
        tasks: list["asyncio.Task[SinkStats]"],
        idle_exit: Optional[float],
        on_health: Optional[HealthCallback],
        health_interval: float,
    ) -> None:
        """Report health periodically and implement ``idle_exit``; a crashed sink stops the service."""
        next_health = time.monotonic() + health_interval
        while not stop.is_set():
            await asyncio.sleep(0.2)
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    logger.error("sink task %s crashed: %r; stopping the service", t.get_name(), t.exception())
                    stop.set()
            if on_health is not None and time.monotonic() >= next_health:
                on_health({s.name: s.stats for s in self.sinks})
                next_health = time.monotonic() + health_interval
            if idle_exit is not None:
                idle = self.idle_for()
                if idle is not None and idle >= idle_exit:
                    logger.info("sinks idle for %.1fs; stopping", idle)
                    stop.set()


async def run_sinks(
    settings: Settings,
    names: Optional[Sequence[str]] = None,
    stop: Optional[asyncio.Event] = None,
    *,
    ch: Optional[ClickHouse] = None,
    options: SinkOptions = SinkOptions(),
    apply_migrations: Optional[bool] = None,
    idle_exit: Optional[float] = None,
    on_health: Optional[HealthCallback] = None,
    health_interval: float = 10.0,
) -> dict[str, SinkStats]:
    """Run the named sinks (all when ``names`` is empty) until ``stop`` is set (or idle, see module doc)."""
    service = SinkService(settings, names, ch=ch, options=options, apply_migrations=apply_migrations)
    return await service.run(
        stop or asyncio.Event(), idle_exit=idle_exit, on_health=on_health, health_interval=health_interval
    )
