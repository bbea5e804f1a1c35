"""The SQL door: read-only SQL, over loopback, into the embedded ClickHouse this process owns.

chdb allows one process per data directory, and during a local run that process is the sinks'.
The door lets every other local process read the same engine while it runs: ``agl-stream sql``,
``agl-stream replay``, ``agl-stream dashboard``, any ClickHouse client.

Protocol: the door speaks the part of ClickHouse's own HTTP interface that read clients use, so
any ClickHouse HTTP client connects with an ordinary DSN (``http://agl:<token>@127.0.0.1:<port>/agl``,
what :meth:`DoorAddress.dsn` builds): ``GET /ping``; ``GET|POST /`` with the SQL in the body and/or
the ``query`` parameter, ``database``, ``default_format``, ``param_<name>`` query parameters, the
output format named by a trailing ``FORMAT`` clause (TabSeparated otherwise), ClickHouse's error
bodies and ``X-ClickHouse-*`` headers. Session and transport parameters clickhouse-connect sends
(``session_id``, ``query_id``, compression switches...) are accepted and ignored: the answer is
never compressed and there are no sessions. Any other parameter is a setting change, and is handed
to ClickHouse as ``SET``, which refuses it in read-only mode.

Token: every request but ``/ping`` needs it, as the password of HTTP Basic auth (what ClickHouse
clients send), a ``Bearer`` token, or ``X-ClickHouse-Key``; none gives 401, a wrong one 403
(compared in constant time). It comes from ``--sql-door-token`` / ``AGL_SQL_DOOR_TOKEN``, or is
random per start; the address and token are written to the door file (0600) that local commands
read (:mod:`agl_stream_processors.clickhouse.door_file`). The door binds 127.0.0.1 unless told
otherwise.

Read-only is ClickHouse's: the door's queries run on their own chdb connection whose session has
``readonly = 1`` (no writes, no DDL, no setting changes - ``readonly`` included), applied once
before the first query, after ``max_execution_time`` so a runaway query cannot hold the engine. The
sinks write through their own connection to the same engine, untouched by this one.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import re
import secrets
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from agl_stream.config import Settings

from agl_stream.service import HttpHost, TokenVerdict, add_health_routes, always_healthy, presented_token, token_verdict

from agl_stream_processors.clickhouse.client import Target
from agl_stream_processors.clickhouse.door_file import (
    DoorAddress,
    DoorOptions,
    engine_directory,
    remove_door_file,
    write_door_file,
)

logger = logging.getLogger(__name__)

#: request parameters that steer the HTTP exchange, not the query
TRANSPORT_PARAMS = frozenset(
    {
        "query", "database", "default_format", "user", "password", "session_id", "session_timeout", "session_check",
        "query_id", "quota_key", "compress", "decompress", "wait_end_of_query", "client_protocol_version",
        "enable_http_compression", "send_progress_in_http_headers", "http_headers_progress_interval_ms",
        "buffer_size", "role", "http_response_buffer_size", "output_format_parallel_formatting",
    }
)  # fmt: skip
_TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_CODE = re.compile(r"Code:\s*(\d+)")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTENT_TYPES = {
    "TabSeparated": "text/tab-separated-values; charset=UTF-8",
    "TSV": "text/tab-separated-values; charset=UTF-8",
    "CSV": "text/csv; charset=UTF-8",
    "CSVWithNames": "text/csv; charset=UTF-8",
    "JSON": "application/json; charset=UTF-8",
    "JSONEachRow": "application/x-ndjson; charset=UTF-8",
    "JSONCompact": "application/json; charset=UTF-8",
}


class QueryFailed(Exception):
    """ClickHouse refused or failed a query; the message is ClickHouse's own."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        match = _CODE.search(message)
        self.code = int(match.group(1)) if match else 1000


@dataclass(frozen=True)
class Answer:
    body: bytes
    fmt: str
    rows_read: int
    bytes_read: int
    seconds: float


class ReadOnlyEngine:
    """A read-only chdb connection to the engine this process already hosts; one query at a time."""

    def __init__(self, engine_dir: str, *, max_execution_time: int) -> None:
        import chdb

        self._conn = chdb.connect(engine_dir)
        self._lock = threading.Lock()
        self._database: Optional[str] = None
        self._run(f"SET max_execution_time = {int(max_execution_time)}")
        self._run("SET readonly = 1")  # last: from here on this session can neither write nor change settings
        self.timezone = self._run("SELECT timezone()", "TabSeparated").bytes().decode().strip() or "UTC"

    def _run(self, sql: str, fmt: str = "TabSeparated", params: Optional[dict[str, str]] = None) -> Any:
        try:
            return self._conn.query(sql, fmt, params=params or None)
        except Exception as exc:  # chdb raises RuntimeError subclasses carrying ClickHouse's message
            raise QueryFailed(_clean(str(exc))) from None

    def execute(self, sql: str, *, fmt: str, params: dict[str, str], database: Optional[str], settings: dict[str, str]) -> Answer:
        with self._lock:
            if database and database != self._database:
                if not _IDENTIFIER.match(database):
                    raise QueryFailed(f"Code: 81. DB::Exception: Database {database!r} is not a plain identifier. (UNKNOWN_DATABASE)")
                self._run(f"USE {database}")
                self._database = database
            for name, value in settings.items():  # ClickHouse itself refuses these in read-only mode
                if not _IDENTIFIER.match(name):
                    raise QueryFailed(f"Code: 115. DB::Exception: Unknown setting {name!r}. (UNKNOWN_SETTING)")
                self._run(f"SET {name} = {_quote(value)}")
            started = time.perf_counter()
            result = self._run(sql, fmt, params)
            return Answer(result.bytes(), fmt, result.rows_read(), result.bytes_read(), time.perf_counter() - started)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _clean(message: str) -> str:
    """ClickHouse's exception text without chdb's prefixes (what a server's HTTP error body holds)."""
    at = message.find("Code: ")
    return (message[at:] if at >= 0 else message).strip()


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _error(status: int, code: int, message: str, **headers: str) -> PlainTextResponse:
    body = message if message.startswith("Code: ") else f"Code: {code}. DB::Exception: {message}"
    return PlainTextResponse(body.rstrip() + "\n", status_code=status, headers={"X-ClickHouse-Exception-Code": str(code), **headers})


def token_problem(request: Request, token: str) -> Optional[PlainTextResponse]:
    """401 without a token, 403 with a wrong one, ``None`` when the request may go on."""
    # Basic auth's password (a ClickHouse DSN), a Bearer token, or X-ClickHouse-Key
    verdict = token_verdict(presented_token(request.headers, basic_password=True, headers_also=("x-clickhouse-key",)), token)
    if verdict is TokenVerdict.MISSING:
        return _error(401, 194, "agl-stream SQL door: this request carries no token; use the DSN in the door file "
                      "(AGL_SQL_DOOR_TOKEN) as the password. (REQUIRED_PASSWORD)",
                      **{"WWW-Authenticate": 'Basic realm="agl-stream sql door"'})  # fmt: skip
    if verdict is TokenVerdict.WRONG:
        return _error(403, 516, "agl-stream SQL door: wrong token. (AUTHENTICATION_FAILED)")
    return None


async def _body(request: Request) -> bytes:
    raw = await request.body()
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding in ("", "identity"):
        return raw
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    raise QueryFailed(f"Code: 1. DB::Exception: request body encoding {encoding!r} is not supported by the SQL door. (UNSUPPORTED_METHOD)")


def build_app(engine: ReadOnlyEngine, token: str) -> FastAPI:
    app = FastAPI(title="agl-stream SQL door", docs_url=None, redoc_url=None, openapi_url=None)

    add_health_routes(app, always_healthy(), [], ping=True)  # what ClickHouse clients probe

    @app.api_route("/", methods=["GET", "POST"])
    async def query(request: Request) -> Response:
        refused = token_problem(request, token)
        if refused is not None:
            return refused
        params = dict(request.query_params)
        try:
            body = (await _body(request)).decode() if request.method == "POST" else ""
        except (QueryFailed, OSError, zlib.error, UnicodeDecodeError) as exc:
            return _error(400, getattr(exc, "code", 1), str(exc))
        sql = "\n".join(part for part in (params.get("query", ""), body) if part.strip())
        if not sql.strip():
            return PlainTextResponse("Ok.\n")
        match = _TRAILING_FORMAT.search(sql)
        fmt = match.group(1) if match else params.get("default_format") or "TabSeparated"
        bind = {k[len("param_"):]: v for k, v in params.items() if k.startswith("param_")}
        settings = {k: v for k, v in params.items() if k not in TRANSPORT_PARAMS and not k.startswith("param_")}
        query_id = params.get("query_id") or str(uuid.uuid4())
        try:
            answer = await asyncio.to_thread(
                engine.execute, sql, fmt=fmt, params=bind, database=params.get("database"), settings=settings
            )
        except QueryFailed as exc:
            return _error(500 if exc.code != 164 else 403, exc.code, str(exc), **{"X-ClickHouse-Query-Id": query_id})
        summary = {"read_rows": str(answer.rows_read), "read_bytes": str(answer.bytes_read), "written_rows": "0",
                   "written_bytes": "0", "elapsed_ns": str(int(answer.seconds * 1e9))}  # fmt: skip
        return Response(
            answer.body,
            media_type=_CONTENT_TYPES.get(answer.fmt, "application/octet-stream"),
            headers={
                "X-ClickHouse-Format": answer.fmt,
                "X-ClickHouse-Query-Id": query_id,
                "X-ClickHouse-Timezone": engine.timezone,
                "X-ClickHouse-Summary": json.dumps(summary),
            },
        )

    return app


class SqlDoor:
    """The door of one embedded engine: a read-only connection, an HTTP server and the door file."""

    def __init__(self, target: Target, options: DoorOptions = DoorOptions()) -> None:
        if not target.embedded:
            raise ValueError("the SQL door serves an embedded engine (chdb://); a ClickHouse server has its own HTTP interface")
        self.target = target
        self.options = options
        self.token = options.token or Settings.from_env().sql_door_token or secrets.token_urlsafe(32)
        self.engine: Optional[ReadOnlyEngine] = None
        self.server: Optional[HttpHost] = None
        self.address: Optional[DoorAddress] = None

    async def start(self) -> "SqlDoor":
        engine_dir = engine_directory(self.target.dsn)
        self.engine = await asyncio.to_thread(ReadOnlyEngine, str(engine_dir), max_execution_time=self.options.max_execution_time)
        try:
            app = build_app(self.engine, self.token)
            # on a loop of its own: a read waits for the GIL, not for the sinks' loop to be idle
            self.server = await HttpHost(app, self.options.host, self.options.port, name="sql-door").start_threaded()
            self.address = DoorAddress(self.server.url, self.token, os.getpid(), str(engine_dir), self.target.database)
            path = write_door_file(self.address)
        except BaseException:
            await self.stop()
            raise
        logger.info("SQL door (read-only) on %s for %s; address and token in %s", self.server.url, engine_dir, path)
        return self

    async def stop(self) -> None:
        if self.address is not None:
            remove_door_file(self.address)
            self.address = None
        if self.server is not None:
            await self.server.stop_threaded()
            self.server = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None
