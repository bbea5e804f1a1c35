"""Execution-match reward: run the predicted and the gold SQL read-only and compare results."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from examples.text_to_sql.build_db import DB_PATH

MAX_STEPS = 2_000_000  # SQLite VM instructions before a query is aborted (runaway joins)


def connect(path: Path = DB_PATH) -> sqlite3.Connection:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    steps = 0

    def guard() -> int:
        nonlocal steps
        steps += 1000
        return 1 if steps > MAX_STEPS else 0

    con.set_progress_handler(guard, 1000)
    return con


def run(sql: str, path: Path = DB_PATH) -> tuple[Optional[list[tuple[Any, ...]]], Optional[str]]:
    """Rows of a query, or the error text (the agent shows it to the model to repair the query)."""
    con = connect(path)
    try:
        return con.execute(sql).fetchall(), None
    except sqlite3.Error as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        con.close()


def _normalize(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in rows)


def extract_sql(reply: str) -> str:
    """The SQL in a ```sql fenced block, else the first SELECT ... up to a semicolon or the end."""
    fenced = re.search(r"```(?:sql)?\s*(.+?)```", reply or "", flags=re.S | re.I)
    if fenced:
        return fenced.group(1).strip().rstrip(";")
    bare = re.search(r"(select\b.+?)(;|$)", reply or "", flags=re.S | re.I)
    return bare.group(1).strip() if bare else ""


def execution_match(predicted_sql: str, gold_sql: str, path: Path = DB_PATH) -> float:
    """1.0 when both queries return the same multiset of rows (order-insensitive), else 0.0."""
    if not predicted_sql.strip():
        return 0.0
    predicted, error = run(predicted_sql, path)
    gold, gold_error = run(gold_sql, path)
    if gold_error is not None:
        raise ValueError(f"gold SQL fails: {gold_error}")
    return float(error is None and predicted is not None and _normalize(predicted) == _normalize(gold or []))
