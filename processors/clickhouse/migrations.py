"""Versioned schema migrations: ``deploy/clickhouse/migrations/NNNN_name.sql`` applied in order, once.

Applied versions are recorded in ``schema_migrations`` with the file's checksum; a recorded
migration whose file changed afterwards is an error (fix forward with a new file instead). Every
statement is written to be re-runnable (``IF NOT EXISTS``), so a run interrupted between a
statement and its bookkeeping row is repaired by running ``migrate`` again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from agl_stream_processors.clickhouse.client import ClickHouse
from agl_stream_processors.deploy_files import DEPLOY_DIR

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = DEPLOY_DIR / "clickhouse" / "migrations"
_FILE = re.compile(r"^(\d{4})_([A-Za-z0-9_]+)\.sql$")

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations
(
    Version UInt32,
    Name String,
    Checksum String,
    AppliedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(AppliedAt)
ORDER BY Version
"""


class MigrationError(RuntimeError):
    """The migration files and the database disagree, or a statement failed."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    def statements(self) -> list[str]:
        return split_statements(self.sql)


def split_statements(sql: str) -> list[str]:
    """Split on lines ending with ``;`` after dropping ``--`` comment lines (no ';' inside strings needed)."""
    statements: list[str] = []
    current: list[str] = []
    for line in sql.splitlines():
        if line.strip().startswith("--"):
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            statement = "\n".join(current).strip().rstrip(";").strip()
            if statement:
                statements.append(statement)
            current = []
    tail = "\n".join(current).strip()
    if tail:
        statements.append(tail)
    return statements


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """All migration files of ``directory``, ordered by version; duplicate versions are an error."""
    if not directory.is_dir():
        raise MigrationError(f"migrations directory {directory} does not exist")
    found: dict[int, Migration] = {}
    for path in sorted(directory.iterdir()):
        match = _FILE.match(path.name)
        if not match:
            if path.suffix == ".sql":
                raise MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
            continue
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"two migrations with version {version}: {found[version].path.name}, {path.name}")
        found[version] = Migration(version, match.group(2), path, path.read_text())
    return [found[v] for v in sorted(found)]


def applied(ch: ClickHouse) -> dict[int, str]:
    """Version -> checksum of the migrations recorded in the database (read-only: no bookkeeping table, none)."""
    if not ch.table_exists("schema_migrations"):
        return {}
    _cols, rows = ch.query_rows("SELECT Version, argMax(Checksum, AppliedAt) FROM schema_migrations GROUP BY Version")
    return {int(v): str(c) for v, c in rows}


def pending(ch: ClickHouse, migrations: Optional[list[Migration]] = None) -> list[Migration]:
    """Migrations not applied yet; a recorded migration whose file changed raises :class:`MigrationError`."""
    migrations = load_migrations() if migrations is None else migrations
    done = applied(ch)
    for m in migrations:
        if m.version in done and done[m.version] != m.checksum:
            raise MigrationError(
                f"migration {m.path.name} was changed after it was applied "
                f"(recorded checksum {done[m.version][:12]}, file {m.checksum[:12]}); add a new migration instead"
            )
    return [m for m in migrations if m.version not in done]


def require_current(ch: ClickHouse) -> None:
    """Raise :class:`MigrationError` unless every migration is applied (for processes without DDL rights)."""
    todo = pending(ch)
    if todo:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in todo)
        raise MigrationError(f"{ch.target.describe()} lacks migrations {names}: run `agl-stream clickhouse migrate`")


def migrate(ch: ClickHouse, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Create the database if needed and apply every pending migration in order; returns those applied."""
    ch.ensure_database()
    ch.command(_BOOKKEEPING)
    todo = pending(ch, load_migrations(directory))
    for m in todo:
        logger.info("applying migration %04d_%s to %s", m.version, m.name, ch.target.describe())
        for statement in m.statements():
            try:
                ch.command(statement)
            except Exception as exc:
                raise MigrationError(f"{m.path.name}: statement failed: {exc}\n{statement[:400]}") from exc
        ch.command(
            "INSERT INTO schema_migrations (Version, Name, Checksum) VALUES ({v:UInt32}, {n:String}, {c:String})",
            {"v": m.version, "n": m.name, "c": m.checksum},
        )
    return todo
