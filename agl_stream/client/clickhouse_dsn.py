"""Which ClickHouse a DSN names: ``chdb:///dir`` (embedded engine) or ``http(s)://user:pass@host:port/db``.

Shared by the sinks (``agl_stream_processors.clickhouse.client``) and the SDK's span reader, so
both read the same DSN the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional
from urllib.parse import unquote, urlparse, urlunparse

DEFAULT_DATABASE = "agl"
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ClickHouseConfigError(ValueError):
    """The DSN cannot be used (bad scheme, bad database name)."""


@dataclass(frozen=True)
class Target:
    """Where the data lives: the DSN with the database split off, and the database name."""

    dsn: str
    database: str
    embedded: bool

    def describe(self) -> str:
        """The DSN without credentials, for logs and CLI output."""
        parsed = urlparse(self.dsn)
        if self.embedded:
            return f"chdb://{parsed.path} (database {self.database})"
        host = parsed.hostname or ""
        port = f":{parsed.port}" if parsed.port else ""
        return f"{parsed.scheme}://{host}{port} (database {self.database})"


def parse_dsn(dsn: str, database: Optional[str] = None) -> Target:
    """Split ``dsn`` into a connection DSN and a database name.

    ``chdb:///abs/dir`` is a data directory (database ``agl`` unless ``?database=`` or ``database``
    says otherwise); ``http(s)://user:pass@host:port/db`` names the database in its path.
    """
    parsed = urlparse(dsn)
    if parsed.scheme == "chdb":
        if parsed.netloc and parsed.netloc not in ("memory", ":memory:"):
            raise ClickHouseConfigError(f"{dsn!r}: use chdb:///absolute/path (three slashes) for a data directory")
        query = dict(p.split("=", 1) for p in parsed.query.split("&") if "=" in p)
        db = database or query.pop("database", None) or DEFAULT_DATABASE
        rest = "&".join(f"{k}={v}" for k, v in query.items())
        conn = f"chdb://{parsed.netloc}{parsed.path}" + (f"?{rest}" if rest else "")
        embedded = True
    elif parsed.scheme in ("http", "https"):
        if not parsed.hostname:
            raise ClickHouseConfigError(f"{dsn!r} has no host")
        path_db = unquote(parsed.path.strip("/")) or None
        db = database or path_db or DEFAULT_DATABASE
        conn = urlunparse((parsed.scheme, parsed.netloc, "", "", parsed.query, ""))
        embedded = False
    else:
        raise ClickHouseConfigError(f"{dsn!r}: the ClickHouse DSN must start with chdb://, http:// or https://")
    if not _DB_NAME.match(db):
        raise ClickHouseConfigError(f"database name {db!r} must match {_DB_NAME.pattern}")
    return Target(conn, db, embedded)
