"""Open a ClickHouse store for reading, wherever it is: a server, an idle embedded engine, or one a
running process owns (through that process's SQL door).

chdb allows one process per data directory. During a local run the processors' sinks own it, so
``agl-stream sql``, ``replay`` and ``dashboard`` go through the sinks' read-only SQL door
(:mod:`agl_stream_processors.clickhouse.door`); when nothing runs they open the engine themselves.
When neither works (the owner runs without a door, or the door does not answer) the caller gets
:class:`EngineUnavailable`, whose message is one line saying why and what to do.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional

from clickhouse_connect.driver.exceptions import ClickHouseError, ProgrammingError

from agl_stream_processors.clickhouse.client import ClickHouse, Target, parse_dsn
from agl_stream_processors.clickhouse.door_file import DoorAddress, engine_directory, read_door_file


class EngineUnavailable(RuntimeError):
    """The store cannot be opened for reading; the message says why and what to do, in one line."""


def _owner_pid(engine_dir: Path) -> Optional[int]:
    """The pid ClickHouse recorded in the engine's ``status`` file (the process holding its lock)."""
    try:
        match = re.search(r"^PID:\s*(\d+)", (engine_dir / "status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def open_reader(dsn: str, *, database: Optional[str] = None) -> ClickHouse:
    """A client to read ``dsn`` with. Its ``door`` attribute names the SQL door it goes through, if any:
    such a client is read-only (ClickHouse refuses writes and DDL on it)."""
    target = parse_dsn(dsn, database)
    if not target.embedded:
        return ClickHouse(target)
    door = read_door_file(engine_directory(target.dsn))
    if door is not None:
        return _through_door(door, target.database)
    return open_embedded(
        target, owned_hint="which serves no SQL door; restart its processors without --no-sql-door, stop it, "
        "or point --dsn at a ClickHouse server"
    )  # fmt: skip


def open_embedded(target: Target, *, owned_hint: str) -> ClickHouse:
    """Open an embedded engine in this process, or raise :class:`EngineUnavailable` saying who owns it."""
    engine_dir = engine_directory(target.dsn)
    with _engine_stderr() as engine_said:  # the engine prints why it cannot start; that goes into our one line
        try:
            return ClickHouse(target)
        except ProgrammingError as exc:
            reason = " ".join(f"{engine_said()} {exc}".split())
    if "Another server instance" in reason or "Cannot lock file" in reason:
        pid = _owner_pid(engine_dir)
        owner = f"process {pid}" if pid else "another process"
        raise EngineUnavailable(f"the embedded ClickHouse at {engine_dir} is owned by {owner}, {owned_hint}")
    raise EngineUnavailable(f"cannot open the embedded ClickHouse at {engine_dir}: {reason}")


@contextlib.contextmanager
def _engine_stderr() -> Iterator[Callable[[], str]]:
    """Capture what the embedded engine writes to file descriptor 2 while it starts (C++ logs, not Python's)."""
    captured = tempfile.TemporaryFile()
    saved = os.dup(2)
    sys.stderr.flush()
    os.dup2(captured.fileno(), 2)
    try:
        yield lambda: (captured.seek(0), captured.read().decode(errors="replace"))[1]
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        captured.close()


def _through_door(door: DoorAddress, database: str) -> ClickHouse:
    try:
        client = ClickHouse(parse_dsn(door.dsn(database)))
    except ClickHouseError as exc:
        raise EngineUnavailable(
            f"the embedded ClickHouse at {door.engine} is owned by process {door.pid}, whose SQL door at {door.url} "
            f"does not answer ({' '.join(str(exc).split())[:200]}); wait for it or stop that process"
        ) from None
    client.door = door
    return client
