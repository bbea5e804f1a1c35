"""How a SQL door is configured and found: its options, and a small JSON file next to the engine's directory.

The process that owns an embedded ClickHouse (``chdb:///dir``) and serves its SQL door writes
``<dir>.sql-door.json`` (mode 0600: it holds the token) with the door's address, token and pid,
and removes it when it stops. Any local command that resolves the same DSN finds the same file;
a file whose pid is gone (a killed process) is ignored. Nothing here imports a web framework:
readers only need the address. It lives in ``agl_stream`` because readers in any service (the SDK's
span reader, the store front door, local commands) find the door the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from agl_stream.config import env_name

#: the user name a door's DSN carries; the door checks only the token (the password)
DOOR_USER = "agl"
TOKEN_ENV = env_name("sql_door_token")


@dataclass(frozen=True)
class DoorOptions:
    host: str = "127.0.0.1"  # loopback: other machines have no business with a local run's engine
    port: int = 0  # 0: a free port (the door file says which)
    token: Optional[str] = None  # None: AGL_SQL_DOOR_TOKEN, else random per start
    max_execution_time: int = 120  # seconds a door query may run


@dataclass(frozen=True)
class DoorAddress:
    url: str  # http://127.0.0.1:PORT
    token: str
    pid: int
    engine: str  # the engine directory (real path)
    database: str

    def dsn(self, database: Optional[str] = None) -> str:
        """An ``http://`` DSN any ClickHouse HTTP client can use (the token travels as the password)."""
        parsed = urlparse(self.url)
        return f"{parsed.scheme}://{DOOR_USER}:{self.token}@{parsed.netloc}/{database or self.database}"


def engine_directory(chdb_dsn: str) -> Path:
    """The engine directory of a ``chdb:///dir`` DSN, spelled the way chdb and clickhouse-connect compare it."""
    return Path(os.path.realpath(urlparse(chdb_dsn).path))


def door_file(engine_dir: Path) -> Path:
    return engine_dir.parent / f"{engine_dir.name}.sql-door.json"


def write_door_file(address: DoorAddress) -> Path:
    """Write the address atomically, readable by this user only (the token is a secret)."""
    path = door_file(Path(address.engine))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode is filtered by the umask; say it exactly
        os.write(fd, json.dumps(asdict(address), indent=2).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def remove_door_file(address: DoorAddress) -> None:
    """Remove the file if it still describes ``address`` (a newer owner's file is left alone)."""
    path = door_file(Path(address.engine))
    if read_door_file(Path(address.engine), require_live=False) == address:
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_door_file(engine_dir: Path, *, require_live: bool = True) -> Optional[DoorAddress]:
    """The door serving ``engine_dir``, or ``None`` when there is no file, it is unreadable, or its process is gone."""
    try:
        doc = json.loads(door_file(engine_dir).read_text())
        address = DoorAddress(**{k: doc[k] for k in ("url", "token", "pid", "engine", "database")})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if require_live and not _alive(address.pid):
        return None
    return address


def door_dsn_for(chdb_dsn: str) -> Optional[str]:
    """The ``http://`` DSN of the live SQL door another process serves for this embedded engine, if any."""
    address = read_door_file(engine_directory(chdb_dsn))
    if address is None or address.pid == os.getpid():
        return None
    return address.dsn()
