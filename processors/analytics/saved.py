"""Saved queries: one ``deploy/clickhouse/queries/<name>.sql`` file each, shared by the CLI and Grafana.

A file starts with ``-- key: value`` header lines: ``title``, ``description``, ``panel``
(``table``, ``timeseries``, ``stat`` or ``traces``), ``columns`` (what the query returns, in order;
tests and dashboard panels rely on it) and, for time series, ``time_column``. A query may take
parameters in ClickHouse's syntax, ``{rollout_id:String}`` (``agl-stream sql --saved NAME -p
rollout_id=...``; a dashboard variable on Grafana and in ``agl-stream dashboard``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from agl_stream_processors.deploy_files import DEPLOY_DIR

QUERIES_DIR = DEPLOY_DIR / "clickhouse" / "queries"
PANELS = ("table", "timeseries", "stat", "traces")
_HEADER = re.compile(r"^--\s*([a-z_]+)\s*:\s*(.*)$")


class SavedQueryError(ValueError):
    """A saved query file is malformed, or a name is unknown."""


@dataclass(frozen=True)
class SavedQuery:
    name: str
    title: str
    description: str
    panel: str
    columns: tuple[str, ...]
    sql: str
    time_column: Optional[str] = None


def parse_saved_query(name: str, text: str) -> SavedQuery:
    headers: dict[str, str] = {}
    body: list[str] = []
    for line in text.splitlines():
        match = _HEADER.match(line) if not body else None
        if match:
            headers[match.group(1)] = match.group(2).strip()
        elif body or line.strip():
            body.append(line)
    missing = [k for k in ("title", "description", "panel", "columns") if not headers.get(k)]
    if missing:
        raise SavedQueryError(f"saved query {name!r} lacks header line(s) {missing}")
    if headers["panel"] not in PANELS:
        raise SavedQueryError(f"saved query {name!r}: panel must be one of {PANELS}, not {headers['panel']!r}")
    columns = tuple(c.strip() for c in headers["columns"].split(",") if c.strip())
    time_column = headers.get("time_column") or None
    if headers["panel"] == "timeseries" and time_column not in columns:
        raise SavedQueryError(f"saved query {name!r}: a timeseries needs a time_column among its columns")
    sql = "\n".join(body).strip().rstrip(";")
    if not sql:
        raise SavedQueryError(f"saved query {name!r} has no SQL")
    return SavedQuery(name, headers["title"], headers["description"], headers["panel"], columns, sql, time_column)


def load_saved_queries(directory: Path = QUERIES_DIR) -> dict[str, SavedQuery]:
    """All saved queries by name, in file-name order."""
    if not directory.is_dir():
        raise SavedQueryError(f"saved queries directory {directory} does not exist")
    return {p.stem: parse_saved_query(p.stem, p.read_text()) for p in sorted(directory.glob("*.sql"))}


def get_saved_query(name: str, directory: Path = QUERIES_DIR) -> SavedQuery:
    queries = load_saved_queries(directory)
    try:
        return queries[name]
    except KeyError:
        raise SavedQueryError(f"no saved query {name!r}; saved queries: {', '.join(queries)}") from None
