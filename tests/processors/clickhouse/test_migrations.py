"""Versioned migrations: applied once, in order, and a changed applied file is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agl_stream_processors.clickhouse import ClickHouse, MigrationError
from agl_stream_processors.clickhouse.migrations import MIGRATIONS_DIR, applied, load_migrations, migrate, split_statements

EXPECTED_TABLES = {"spans", "rollouts", "attempts", "resources", "triplets", "workers", "dead_letters", "training_steps"}


def test_migrate_creates_every_table_and_is_idempotent(ch: ClickHouse) -> None:
    # the fixture already migrated; a second run applies nothing
    assert migrate(ch) == []
    names = {row[0] for row in ch.query_rows("SHOW TABLES")[1]}
    assert EXPECTED_TABLES | {"schema_migrations"} <= names
    assert set(applied(ch)) == {m.version for m in load_migrations()}


def test_new_migration_files_are_applied_in_order(ch: ClickHouse, tmp_path: Path) -> None:
    directory = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, directory)
    (directory / "9001_extra.sql").write_text("CREATE TABLE IF NOT EXISTS extra1 (a UInt8) ENGINE = MergeTree ORDER BY a;\n")
    (directory / "9002_more.sql").write_text(
        "-- depends on 9001\nALTER TABLE extra1 ADD COLUMN IF NOT EXISTS b String;\n"
    )
    assert [m.version for m in migrate(ch, directory)] == [9001, 9002]
    assert [c for c, _ in ch.query_rows("SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = 'extra1' ORDER BY position")[1]] == ["a", "b"]
    assert migrate(ch, directory) == []


def test_a_changed_applied_migration_is_refused(ch: ClickHouse, tmp_path: Path) -> None:
    directory = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, directory)
    first = sorted(directory.glob("0001_*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\nSELECT 1;\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(ch, directory)


def test_badly_named_or_duplicate_files_are_errors(tmp_path: Path) -> None:
    (tmp_path / "init.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_name"):
        load_migrations(tmp_path)
    (tmp_path / "init.sql").unlink()
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0001_b.sql").write_text("SELECT 2;")
    with pytest.raises(MigrationError, match="two migrations"):
        load_migrations(tmp_path)


def test_split_statements_drops_comments_and_keeps_multiline_statements() -> None:
    sql = "-- header\nCREATE TABLE x\n(\n  a UInt8\n)\nENGINE = Memory;\n\nSELECT 1;\nSELECT 2"
    assert split_statements(sql) == ["CREATE TABLE x\n(\n  a UInt8\n)\nENGINE = Memory", "SELECT 1", "SELECT 2"]


def test_processes_without_ddl_rights_only_check_that_the_schema_is_current(store_dsn: str) -> None:
    from agl_stream_processors.clickhouse import connect
    from agl_stream_processors.clickhouse.migrations import require_current

    with connect(store_dsn, create_database=True) as fresh:
        with pytest.raises(MigrationError, match="clickhouse migrate"):
            require_current(fresh)
        migrate(fresh)
        require_current(fresh)


@pytest.mark.parametrize("table", ["spans", "triplets"])
def test_wide_tables_merge_vertically_and_still_collapse_duplicates(ch: ClickHouse, table: str) -> None:
    """Migration 0003: spans and triplets merge column by column (it bounds a merge's memory), and a
    merge still collapses a batch inserted more than once (a sink restarted before it committed)."""
    from agl_stream_processors.clickhouse.columns import ColumnBatch
    from agl_stream_processors.sinks.specs import SINKS
    from tests.processors.clickhouse.store import make_span, make_trajectory

    engine = ch.scalar("SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = {t:String}", {"t": table})
    assert "vertical_merge_algorithm_min_rows_to_activate = 1" in engine
    assert "vertical_merge_algorithm_min_columns_to_activate = 1" in engine

    spec = SINKS[table]
    rollouts = [f"ro-{i:012x}" for i in range(20)]
    values = [make_span(r, sequence_id=s) for r in rollouts for s in range(1, 4)] if table == "spans" else [make_trajectory(r) for r in rollouts]
    batch = ColumnBatch(spec.schema)
    for value in values:
        batch.rows.extend(spec.to_rows(value, None))
    rows = batch.to_arrow()
    for _ in range(3):  # the same batch three times: three parts, every key three times
        ch.insert_arrow(table, rows)
    ch.command(f"OPTIMIZE TABLE {table} FINAL")
    assert ch.scalar(f"SELECT count() FROM {table}") == rows.num_rows
    assert ch.scalar(f"SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = '{table}' AND active") == 1
