"""``agl-stream export trajectories``: the triplets table as S3-shaped JSON (see :mod:`.trajectories`).

Registered in ``agl_stream/cli/main.py``'s SUBCOMMANDS. Connects as ``agl-stream sql`` does (``--dsn``,
else ``AGL_CLICKHOUSE_DSN``, else ``<AGL_DATA_DIR>/clickhouse``; through the processors' read-only
SQL door while a local run owns the embedded engine). Exit codes: 0 exported, 2 bad arguments,
1 the engine cannot be reached or read (one ``error:`` line on stderr either way).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from agl_stream.config import Settings

export = typer.Typer(help="Export the agl tables in other tools' shapes.", no_args_is_help=True)


@export.callback()
def _group() -> None:
    """Export the agl tables in other tools' shapes."""  # a callback keeps `export` a group of one command

DSN_HELP = "ClickHouse DSN: chdb:///dir or http(s)://user:pass@host:8123/db (default: AGL_CLICKHOUSE_DSN or <data_dir>/clickhouse)"


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _open(dsn: str) -> Any:
    """A read client, or exit: 2 for a malformed DSN, 1 for an engine that cannot be reached."""
    from clickhouse_connect.driver.exceptions import ClickHouseError

    from agl_stream_processors.clickhouse.client import ClickHouseConfigError, parse_dsn
    from agl_stream_processors.clickhouse.reader import EngineUnavailable, open_reader

    try:
        return open_reader(dsn)
    except ClickHouseConfigError as exc:
        _fail(str(exc))
    except EngineUnavailable as exc:
        _fail(str(exc), code=1)
    except ClickHouseError as exc:  # a server that does not answer (connection refused, bad credentials, ...)
        where = parse_dsn(dsn).describe()  # without credentials
        _fail(f"cannot reach ClickHouse at {where}: {' '.join(str(exc).split())[:300]}", code=1)


@export.command("trajectories")
def trajectories_command(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="file to write (default, or '-': stdout)"),
    rollout_id: Optional[list[str]] = typer.Option(None, "--rollout-id", "-r", help="only these rollouts (repeatable)"),
    mode: Optional[str] = typer.Option(None, "--mode", help="only rollouts of this mode: train, val or test"),
    since: Optional[str] = typer.Option(None, "--since", help="trajectories created since: 30m, 2h, 7d or an ISO time"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="at most this many trajectories (the oldest first)"),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (one trajectory per line) or json (one array)"),
    adapter: Optional[str] = typer.Option(
        None, "--adapter", help="the rows of this adapter label, e.g. replay:tracer (default: the live run's)"
    ),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", help="local tokenizer.json or model folder: decode token ids to text (default: text is null)"
    ),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP),
) -> None:
    """Write each rollout's final trajectory in S3's shape: transitions (prompt/response token ids,
    reward), total_reward (the sum of the transitions' rewards) and the rollout's metadata."""
    from clickhouse_connect.driver.exceptions import ClickHouseError

    from agl_stream_processors.export.trajectories import (
        FORMATS,
        ExportError,
        ExportSelection,
        load_decoder,
        read_trajectories,
        select_trajectories,
        write_trajectories,
    )
    from agl_stream_processors.replay import ReplayError, parse_since

    if fmt not in FORMATS:
        _fail(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    to_stdout = output is None or str(output) == "-"
    if not to_stdout and output is not None and not output.parent.is_dir():
        _fail(f"--output {output}: folder {output.parent} does not exist")
    if not to_stdout and output is not None and output.is_dir():
        _fail(f"--output {output} is a folder; name a file")
    try:
        selection = ExportSelection(tuple(rollout_id or ()), mode, parse_since(since) if since else None, limit, adapter)
        decode = load_decoder(tokenizer) if tokenizer is not None else None
    except (ExportError, ReplayError) as exc:
        _fail(str(exc))
    with _open(dsn or Settings.from_env().effective_clickhouse_dsn) as ch:
        try:
            keys = select_trajectories(ch, selection)
            trajectories = read_trajectories(ch, keys, decode)
            if to_stdout:
                count = write_trajectories(trajectories, sys.stdout, fmt)
            else:
                assert output is not None
                partial = output.with_name(f".{output.name}.partial")  # a failed export leaves no half file behind
                try:
                    with partial.open("w", encoding="utf-8") as out:
                        count = write_trajectories(trajectories, out, fmt)
                    os.replace(partial, output)
                finally:
                    partial.unlink(missing_ok=True)
        except ClickHouseError as exc:
            hint = " (nothing was written here yet: check --dsn / AGL_DATA_DIR)" if getattr(exc, "code", None) in (60, 81) else ""
            _fail(" ".join(str(exc).split())[:500] + hint, code=1)
    where = "stdout" if to_stdout else str(output)
    typer.echo(f"exported {count} {'trajectory' if count == 1 else 'trajectories'} to {where}", err=True)
