"""Command-line entry points of the ClickHouse side: ``clickhouse``, ``sql`` and ``replay``.

Registered in ``agl_stream/cli/main.py``'s SUBCOMMANDS:

* ``agl-stream clickhouse migrate|status|sink`` - schema migrations and the Kafka -> ClickHouse sinks
* ``agl-stream sql "SELECT ..." [--format table|csv|json]`` / ``--saved NAME`` / ``--list``
* ``agl-stream replay --adapter SPEC [--adapter-option k=v] [--from DSN] [--rollout-id ...|--since 2h]``
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from agl_stream.config import Settings

clickhouse = typer.Typer(help="ClickHouse schema migrations and the Kafka -> ClickHouse sinks.", no_args_is_help=True)

DSN_HELP = "ClickHouse DSN: chdb:///dir or http(s)://user:pass@host:8123/db (default: AGL_CLICKHOUSE_DSN or <data_dir>/clickhouse)"


def _dsn(dsn: Optional[str]) -> str:
    return dsn or Settings.from_env().effective_clickhouse_dsn


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _reader(dsn: str) -> Any:
    """A read client (through a running SQL door when another process owns the embedded engine), or one error line."""
    from agl_stream_processors.clickhouse.client import ClickHouseConfigError
    from agl_stream_processors.clickhouse.reader import EngineUnavailable, open_reader

    try:
        return open_reader(dsn)
    except (EngineUnavailable, ClickHouseConfigError) as exc:
        _fail(str(exc), code=1)


# ---------------------------------------------------------------------------------------------- clickhouse


@clickhouse.command("migrate")
def migrate_command(
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP),
    migrations_dir: Optional[Path] = typer.Option(None, "--migrations-dir", help="default: deploy/clickhouse/migrations"),
) -> None:
    """Apply pending schema migrations (idempotent: an up-to-date database is left alone)."""
    from agl_stream_processors.clickhouse import ClickHouse, ClickHouseConfigError, parse_dsn
    from agl_stream_processors.clickhouse.migrations import MIGRATIONS_DIR, MigrationError, migrate
    from agl_stream_processors.clickhouse.reader import EngineUnavailable, open_embedded

    try:
        target = parse_dsn(_dsn(dsn))
    except ClickHouseConfigError as exc:
        _fail(str(exc))
    try:  # migrations write: an embedded engine must be idle (its sinks apply them themselves when they start)
        ch = open_embedded(target, owned_hint="and migrations need it idle; stop it first") if target.embedded else ClickHouse(target)
    except EngineUnavailable as exc:
        _fail(str(exc), code=1)
    with ch:
        try:
            applied = migrate(ch, migrations_dir or MIGRATIONS_DIR)
        except MigrationError as exc:
            _fail(str(exc))
        where = ch.target.describe()
    for m in applied:
        typer.echo(f"applied {m.version:04d}_{m.name}")
    typer.echo(f"schema up to date at {where}")


@clickhouse.command("status")
def status_command(dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP)) -> None:
    """Show applied and pending migrations and the row count of every table."""
    from agl_stream_processors.clickhouse.migrations import applied, load_migrations

    with _reader(_dsn(dsn)) as ch:
        done = applied(ch)
        for m in load_migrations():
            typer.echo(f"{m.version:04d}_{m.name}: {'applied' if m.version in done else 'PENDING'}")
        _cols, rows = ch.query_rows(
            "SELECT name, total_rows FROM system.tables WHERE database = currentDatabase() ORDER BY name"
        )
    for name, total in rows:
        typer.echo(f"  {name}: {total if total is not None else '?'} rows")


@clickhouse.command("sink")
def sink_command(
    names: Optional[list[str]] = typer.Argument(
        None, help="sinks to run (default: all): spans attempts rollouts triplets resources workers dlq training_steps training_runs datasets"
    ),
    batch_size: int = typer.Option(1000, "--batch-size", min=1, help="records per insert (SinkOptions.batch_size)"),
    max_wait: Optional[float] = typer.Option(
        None, "--max-wait", min=0.01, help="seconds a batch may wait to fill (default: each sink's own, 0.2-2 s)"
    ),
    until_idle: Optional[float] = typer.Option(None, "--until-idle", help="exit once every sink has read to the end of its topic and seen no record for this many seconds (drain mode)"),
    health_interval: float = typer.Option(10.0, "--health-interval", help="seconds between health lines on stdout"),
    apply_migrations: Optional[bool] = typer.Option(
        None, "--migrate/--no-migrate", help="apply pending migrations first (default: only with the embedded engine)"
    ),
    sql_door: bool = typer.Option(True, "--sql-door/--no-sql-door", help="embedded engine: serve read-only SQL to local commands"),
    sql_door_host: Optional[str] = typer.Option(
        None, help="address of the SQL door (env: AGL_SQL_DOOR_HOST; default: 127.0.0.1)"
    ),
    sql_door_port: Optional[int] = typer.Option(
        None, min=0, max=65535, help="port of the SQL door, 0: a free one (env: AGL_SQL_DOOR_PORT; default: 0)"
    ),
) -> None:
    """Run the Kafka -> ClickHouse sinks in this process (one shared client; Ctrl+C stops gracefully).

    With the embedded engine every sink must run in this one process (chdb: one process per data
    directory); with an HTTP DSN start as many processes as you like, each with any subset.
    """
    from agl_stream.service import run_until_signal
    from agl_stream_processors.sinks import SinkOptions, SinkService
    from agl_stream_processors.sinks.specs import resolve

    settings = Settings.from_env(sql_door_host=sql_door_host, sql_door_port=sql_door_port)
    sql_door_host, sql_door_port = settings.sql_door_host, settings.sql_door_port
    try:
        resolve(names)
    except KeyError as exc:
        _fail(str(exc.args[0]))
    from agl_stream_processors.clickhouse.door_file import DoorOptions

    service = SinkService(
        settings, names, options=SinkOptions(batch_size=batch_size, max_wait=max_wait), apply_migrations=apply_migrations,
        door=DoorOptions(host=sql_door_host, port=sql_door_port) if sql_door else None,
    )  # fmt: skip

    def report(_stats: Any) -> None:
        typer.echo(json.dumps({"health": service.health()}))
        sys.stdout.flush()

    run_until_signal(lambda stop: service.run(stop, idle_exit=until_idle, on_health=report, health_interval=health_interval),
                     name="sinks")
    typer.echo(json.dumps({"final": service.health()}))


# ---------------------------------------------------------------------------------------------- sql


def sql(
    query: Optional[str] = typer.Argument(None, help="SQL to run (tables: spans, rollouts, attempts, triplets, ...)"),
    saved: Optional[str] = typer.Option(None, "--saved", "-s", help="run a saved query by name"),
    list_saved: bool = typer.Option(False, "--list", "-l", help="list the saved queries"),
    fmt: str = typer.Option("table", "--format", "-f", help="table, csv or json (JSON Lines)"),
    param: Optional[list[str]] = typer.Option(
        None, "--param", "-p", help="NAME=VALUE for a {NAME:Type} query parameter (repeatable)"
    ),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP),
) -> None:
    """Run SQL (or a saved query) against the agl tables and print a table, CSV or JSON.

    While a local run owns the embedded engine, the query goes through the processors' read-only
    SQL door (found next to the engine's directory); writes are refused there.
    """
    from agl_stream_processors.analytics import SavedQueryError, get_saved_query, load_saved_queries
    from agl_stream_processors.analytics.output import FORMATS

    if fmt not in FORMATS:
        _fail(f"--format must be one of {', '.join(FORMATS)}")
    if list_saved:
        queries = load_saved_queries()
        _print(("name", "title", "description"), [(q.name, q.title, q.description) for q in queries.values()], fmt, "saved queries")
        return
    if (query is None) == (saved is None):
        _fail("give a SQL query or --saved NAME (or --list)")
    title = None
    if saved is not None:
        try:
            saved_query = get_saved_query(saved)
        except SavedQueryError as exc:
            _fail(str(exc))
        query, title = saved_query.sql, saved_query.title
    parameters: dict[str, str] = {}
    for item in param or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            _fail(f"--param {item!r} is not NAME=VALUE")
        parameters[name] = value
    from clickhouse_connect.driver.exceptions import ClickHouseError

    with _reader(_dsn(dsn)) as ch:
        try:
            columns, rows = ch.query_rows(query or "", parameters or None)
        except ClickHouseError as exc:
            hint = " (nothing was written here yet: check --dsn / AGL_DATA_DIR)" if getattr(exc, "code", None) == 81 else ""
            _fail(" ".join(str(exc).split()) + hint, code=1)
    _print(columns, rows, fmt, title)


def _print(columns: Any, rows: Any, fmt: str, title: Optional[str]) -> None:
    from agl_stream_processors.analytics.output import to_csv, to_json_lines, to_rich_table

    if fmt == "csv":
        sys.stdout.write(to_csv(columns, rows))
    elif fmt == "json":
        sys.stdout.write(to_json_lines(columns, rows))
    else:
        from rich.console import Console

        Console().print(to_rich_table(columns, rows, title))
        typer.echo(f"{len(rows)} row(s)", err=True)


# ---------------------------------------------------------------------------------------------- replay


def replay(
    adapter: str = typer.Option(
        ..., "--adapter", "-a", help="tracer, llm_proxy, a class name or package.module:Class (options: NAME:k=v,k=v)"
    ),
    adapter_option: Optional[list[str]] = typer.Option(None, "--adapter-option", "-o", help="k=v (JSON values), repeatable"),
    source: Optional[str] = typer.Option(None, "--from", help=DSN_HELP),
    rollout_id: Optional[list[str]] = typer.Option(None, "--rollout-id", "-r", help="replay these rollouts (repeatable)"),
    since: Optional[str] = typer.Option(None, "--since", help="attempts whose first span is newer: 30m, 2h, 7d or ISO time"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="at most this many attempts"),
    to_topic: Optional[str] = typer.Option(
        None, "--to-topic", help="publish to this catalog topic (e.g. triplets) instead of the table"
    ),
    to_table: bool = typer.Option(False, "--to-table", help="write rows to the triplets table (the default)"),
    label: Optional[str] = typer.Option(
        None, "--label", help="tag of the replayed rows (Adapter = replay:<label>); default: the adapter spec"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="adapt and report, write nothing"),
) -> None:
    """Re-derive triplets from stored spans with another adapter configuration.

    While a local run owns the embedded engine, spans are read through the processors' read-only
    SQL door: replay then works with --dry-run or --to-topic, not into the triplets table.
    """
    from agl_stream_processors.replay import (
        ReplayError,
        ReplayReport,
        Selection,
        load_adapter,
        parse_since,
        publish_to_topic,
        write_to_table,
    )
    from agl_stream_processors.replay import replay as run_replay

    if to_topic and to_table:
        _fail("choose --to-topic or --to-table, not both")
    options: dict[str, Any] = {}
    for item in adapter_option or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            _fail(f"--adapter-option {item!r} is not k=v")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    try:
        fn = load_adapter(adapter, options)
        selection = Selection(tuple(rollout_id or ()), parse_since(since) if since else None, limit)
    except ReplayError as exc:
        _fail(str(exc))
    tag = label or adapter + "".join(f",{k}={json.dumps(v)}" for k, v in sorted(options.items()))
    report = ReplayReport(tag)
    settings = Settings.from_env()
    with _reader(source or settings.effective_clickhouse_dsn) as ch:
        if ch.door is not None and not (dry_run or to_topic):
            _fail(
                f"process {ch.door.pid} owns the embedded ClickHouse and its SQL door is read-only: replay with "
                "--dry-run or --to-topic NAME while it runs, or into the table once it stopped",
                code=1,
            )
        try:
            trajectories = list(run_replay(ch, fn, label=tag, selection=selection, report=report))
        except ReplayError as exc:
            _fail(str(exc))
        if dry_run:
            written = 0
        elif to_topic:
            written = asyncio.run(publish_to_topic(settings, settings.topic(to_topic), trajectories))
        else:
            written = write_to_table(ch, trajectories)
    summary = {
        "label": f"replay:{tag}",
        "attempts": report.attempts,
        "spans": report.spans,
        "trajectories": report.trajectories,
        "triplets": report.triplets,
        "written": written,
        "destination": "none (dry run)" if dry_run else (settings.topic(to_topic) if to_topic else "table triplets"),
        "adapter_failures": report.failures,
    }
    typer.echo(json.dumps(summary, indent=2))
    if report.failures:
        raise typer.Exit(1)
