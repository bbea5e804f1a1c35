"""Where the dashboard reads: one store chosen by DSN, re-resolved when it stops answering.

A server DSN and a live SQL door (another process owns the embedded engine) keep one client open.
An embedded engine nobody owns is opened per request and closed right after, so the dashboard
never holds the data directory a run is about to start on. Results come back typed (exact
instants, maps, arrays) and leave as JSON-ready rows.
"""

from __future__ import annotations

import contextlib
import math
import threading
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Iterator, Mapping, Optional

from clickhouse_connect.driver.exceptions import ClickHouseError

from agl_stream_processors.clickhouse.client import ClickHouse, parse_dsn
from agl_stream_processors.clickhouse.reader import open_reader


class DataSource:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.target = parse_dsn(dsn)  # fails early on a malformed DSN
        self._lock = threading.Lock()
        self._client: Optional[ClickHouse] = None

    def describe(self) -> dict[str, Any]:
        """What the page says it reads (no credentials)."""
        with self._lock:
            door = self._client.door if self._client is not None else None
        if not self.target.embedded:
            return {"kind": "server", "where": self.target.describe()}
        if door is not None:
            return {"kind": "door", "where": f"embedded engine {door.engine} via the SQL door of process {door.pid}"}
        return {"kind": "embedded", "where": f"embedded engine {self.target.describe()}"}

    @contextlib.contextmanager
    def reader(self) -> Iterator[ClickHouse]:
        """A client for one batch of queries (raises ``EngineUnavailable`` with a one-line reason)."""
        with self._lock:
            client = self._client or open_reader(self.dsn)
            keep = client.door is not None or not client.target.embedded
            self._client = client if keep else None
            try:
                yield client
            except ClickHouseError as exc:
                if keep and _connection_lost(exc):  # the run ended (door gone) or the server went away: re-resolve
                    self._client = None
                    client.close()
                raise
            finally:
                if not keep:
                    client.close()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _connection_lost(exc: ClickHouseError) -> bool:
    text = str(exc)
    return getattr(exc, "code", None) is None and not text.startswith("Received ClickHouse exception")


def query(ch: ClickHouse, sql: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Columns and JSON-ready rows: instants as epoch milliseconds, maps as objects, no NaN."""
    columns, rows = ch.query_aware(sql, dict(params) or None)
    return {"columns": columns, "rows": [[_plain(v) for v in row] for row in rows]}


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return moment.timestamp() * 1000
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp() * 1000
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return str(value)  # UUID, IP addresses...
