"""One ClickHouse client for both transports, chosen by DSN: ``chdb:///dir`` or ``http(s)://user:pass@host:port/db``.

Both go through ``clickhouse_connect.get_client`` so every caller uses the same Client API. The
embedded engine (chdb) allows one data directory per process and its client is not documented as
thread-safe, so :class:`ClickHouse` serializes every call behind a lock; the ``a*`` methods run the
blocking calls in a worker thread so an event loop running several sinks never blocks on them.
Every call therefore goes through this one client, which is where the fault-injection failpoint
(``AGL_CLICKHOUSE_FAILPOINT``, :mod:`agl_stream_processors.clickhouse.failpoint`) sits. An embedded
engine starts with the memory bounds of :mod:`agl_stream_processors.clickhouse.engine`, and a call that
hits one raises :class:`EngineMemoryLimitExceeded` naming the setting that moves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Iterator, Mapping, Optional

import clickhouse_connect
import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from agl_stream.client.clickhouse_dsn import DEFAULT_DATABASE, ClickHouseConfigError, Target, parse_dsn
from agl_stream_processors.clickhouse import engine, failpoint

__all__ = ["DEFAULT_DATABASE", "ClickHouse", "ClickHouseConfigError", "EngineMemoryLimitExceeded", "Target", "connect",
           "parse_dsn"]  # fmt: skip


class EngineMemoryLimitExceeded(DatabaseError):
    """The embedded engine refused an allocation over a memory limit; the message says which setting moves it.

    A :class:`DatabaseError` like the one it replaces, so callers' handling is unchanged: the sinks log it
    and retry the batch with backoff, committing nothing meanwhile (``Sink._retry``)."""


class ClickHouse:
    """A lock-guarded clickhouse-connect client bound to one database (created on demand)."""

    def __init__(
        self, target: Target, *, create_database: bool = False, engine_settings: Optional[Mapping[str, str]] = None
    ) -> None:
        """``engine_settings``: ClickHouse settings the embedded engine starts with (ignored for a server);
        ``None`` means :func:`engine.engine_settings` of the environment's settings, ``{}`` ClickHouse's own."""
        self.target = target
        self.database = target.database
        self.door: Optional[Any] = None  # the SQL door this client reads through (see reader.open_reader), if any
        self._lock = threading.Lock()
        options: dict[str, str] = {}
        if target.embedded:  # the engine's start-up settings; a server configures itself (see engine.py)
            options = dict(engine.engine_settings() if engine_settings is None else engine_settings)
        self.engine_settings = options
        # wrap(): the client itself unless AGL_CLICKHOUSE_FAILPOINT is set (fault injection, see failpoint.py)
        self._client: Client = failpoint.wrap(
            clickhouse_connect.get_client(dsn=target.dsn, **({"chdb_options": options} if options else {}))
        )
        self._client.database = self.database  # applied per query; the database may not exist yet
        if create_database:
            try:
                self.ensure_database()
            except BaseException:
                self._client.close()
                raise

    @classmethod
    def connect(
        cls, dsn: str, database: Optional[str] = None, *, create_database: bool = False,
        engine_settings: Optional[Mapping[str, str]] = None,
    ) -> "ClickHouse":
        return cls(parse_dsn(dsn, database), create_database=create_database, engine_settings=engine_settings)

    def ensure_database(self) -> None:
        """``CREATE DATABASE IF NOT EXISTS`` (DDL: only the migrator needs the right to do it)."""
        with self._call():
            self._client.command(f"CREATE DATABASE IF NOT EXISTS {self.database}", use_database=False)

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        """Hold the lock for one call; name the setting behind an embedded engine's memory limit when one is hit."""
        with self._lock:
            try:
                yield
            except DatabaseError as exc:
                message = str(exc)
                hit = exc.name == engine.MEMORY_LIMIT_EXCEEDED or engine.MEMORY_LIMIT_EXCEEDED in message
                if not (hit and self.target.embedded):
                    raise
                hint = engine.memory_limit_hint(message)
                raise EngineMemoryLimitExceeded(f"{message.rstrip()} [{hint}]", code=exc.code, name=exc.name) from exc

    @property
    def raw(self) -> Client:
        """The underlying clickhouse-connect client; callers must not use it concurrently."""
        return self._client

    # ---------------------------------------------------------------- blocking API (serialized)

    def command(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> Any:
        with self._call():
            return self._client.command(sql, parameters=parameters)

    def query_arrow(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> pa.Table:
        with self._call():
            return self._client.query_arrow(sql, parameters=parameters, use_strings=True)

    def query_rows(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Column names and rows as Python values."""
        with self._call():
            result = self._client.query(sql, parameters=parameters)
            return list(result.column_names), [tuple(r) for r in result.result_rows]

    def query_aware(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Like :meth:`query_rows`, with timezone-aware datetimes (exact instants whatever the server's timezone)."""
        with self._call():
            result = self._client.query(sql, parameters=parameters, tz_mode="aware")
            return list(result.column_names), [tuple(r) for r in result.result_rows]

    def scalar(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> Any:
        _cols, rows = self.query_rows(sql, parameters)
        return rows[0][0] if rows else None

    def insert_arrow(self, table: str, data: pa.Table) -> int:
        """Insert a pyarrow table whose column names match the target table; returns the row count."""
        if data.num_rows == 0:
            return 0
        with self._call():
            self._client.insert_arrow(table, data)
        return data.num_rows

    def table_exists(self, table: str) -> bool:
        return bool(self.scalar("EXISTS TABLE {db:Identifier}.{t:Identifier}", {"db": self.database, "t": table}))

    def close(self) -> None:
        with self._lock:
            self._client.close()

    def __enter__(self) -> "ClickHouse":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- async API (off the event loop)

    async def ainsert_arrow(self, table: str, data: pa.Table) -> int:
        return await asyncio.to_thread(self.insert_arrow, table, data)

    async def aquery_arrow(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> pa.Table:
        return await asyncio.to_thread(self.query_arrow, sql, parameters)

    async def acommand(self, sql: str, parameters: Optional[dict[str, Any]] = None) -> Any:
        return await asyncio.to_thread(self.command, sql, parameters)


def connect(
    dsn: str, database: Optional[str] = None, *, create_database: bool = False,
    engine_settings: Optional[Mapping[str, str]] = None,
) -> ClickHouse:
    """Open the store at ``dsn`` (see :func:`parse_dsn`); ``create_database`` creates it if missing.
    ``engine_settings``: see :class:`ClickHouse`."""
    return ClickHouse.connect(dsn, database, create_database=create_database, engine_settings=engine_settings)

