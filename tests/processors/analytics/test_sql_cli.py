"""``agl-stream sql`` and ``agl-stream clickhouse migrate|status`` against a real engine."""

from __future__ import annotations

import csv
import io
import json

import typer
from typer.testing import CliRunner

from agl_stream_processors.cli import clickhouse, sql
from agl_stream_processors.clickhouse import ClickHouse
from tests.processors.clickhouse.store import populate

runner = CliRunner()


def _sql_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(sql)
    return app


def test_sql_prints_csv_json_and_a_table(ch: ClickHouse, store_dsn: str) -> None:
    populate(ch)
    query = "SELECT RolloutId AS rollout, Status AS status, Attempts AS attempts FROM rollouts FINAL ORDER BY rollout"
    as_csv = runner.invoke(_sql_app(), [query, "--format", "csv", "--dsn", store_dsn])
    assert as_csv.exit_code == 0, as_csv.output
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(rows) == 6 and rows[0]["status"] == "succeeded"
    as_json = runner.invoke(_sql_app(), [query, "-f", "json", "--dsn", store_dsn])
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert {r["status"] for r in records} == {"succeeded", "failed", "running"} and records[0]["attempts"] == 1
    as_table = runner.invoke(_sql_app(), [query, "--dsn", store_dsn])
    assert as_table.exit_code == 0 and "rollout" in as_table.stdout and "ro-00000000000f" in as_table.stdout


def test_saved_queries_can_be_listed_and_run(ch: ClickHouse, store_dsn: str) -> None:
    populate(ch)
    listed = runner.invoke(_sql_app(), ["--list", "-f", "csv", "--dsn", store_dsn])
    assert "stage_latency" in listed.stdout and "top_failing_tasks" in listed.stdout
    result = runner.invoke(_sql_app(), ["--saved", "rollout_outcomes", "-f", "json", "--dsn", store_dsn])
    assert result.exit_code == 0, result.output
    statuses = {json.loads(line)["status"]: json.loads(line)["rollouts"] for line in result.stdout.splitlines()}
    assert statuses == {"succeeded": 4, "failed": 1, "running": 1}


def test_sql_errors_are_reported_not_raised(ch: ClickHouse, store_dsn: str) -> None:
    bad_sql = runner.invoke(_sql_app(), ["SELECT * FROM no_such_table", "--dsn", store_dsn])
    assert bad_sql.exit_code == 1 and "no_such_table" in bad_sql.output
    assert runner.invoke(_sql_app(), ["--saved", "nope", "--dsn", store_dsn]).exit_code == 2
    assert runner.invoke(_sql_app(), ["SELECT 1", "--format", "xml", "--dsn", store_dsn]).exit_code == 2
    assert runner.invoke(_sql_app(), ["--dsn", store_dsn]).exit_code == 2


def test_migrate_and_status_commands(store_dsn: str) -> None:
    first = runner.invoke(clickhouse, ["migrate", "--dsn", store_dsn])
    assert first.exit_code == 0, first.output
    assert "applied 0001_init" in first.stdout
    again = runner.invoke(clickhouse, ["migrate", "--dsn", store_dsn])
    assert "applied" not in again.stdout.replace("up to date", "") and "schema up to date" in again.stdout
    status = runner.invoke(clickhouse, ["status", "--dsn", store_dsn])
    assert "0001_init: applied" in status.stdout and "spans: 0 rows" in status.stdout
