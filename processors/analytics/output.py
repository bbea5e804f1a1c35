"""Render query results as a rich table, CSV or JSON lines (what ``agl-stream sql --format`` prints)."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Sequence
from uuid import UUID

FORMATS = ("table", "csv", "json")


def _plain(value: Any) -> Any:
    """JSON-friendly value: datetimes in ISO 8601, bytes as text, non-finite floats as null."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    plain = _plain(value)
    return plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)


def to_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else _cell(v) for v in row])
    return buffer.getvalue()


def to_json_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """One JSON object per row (JSON Lines), so large results stream and ``jq`` reads them."""
    return "".join(json.dumps({c: _plain(v) for c, v in zip(columns, row)}, ensure_ascii=False) + "\n" for row in rows)


def to_rich_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> Any:
    from rich.table import Table

    table = Table(title=title, show_lines=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*[_cell(v) for v in row])
    return table
