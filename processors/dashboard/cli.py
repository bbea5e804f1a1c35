"""``agl-stream dashboard``: serve the run dashboard on this machine."""

from __future__ import annotations

import os
import secrets
import sys
from typing import Optional

import typer

from agl_stream.config import Settings

TOKEN_ENV = "AGL_DASHBOARD_TOKEN"


def dashboard(
    dsn: Optional[str] = typer.Option(
        None, "--dsn", help="chdb:///dir or http(s)://user:pass@host:8123/db (default: AGL_CLICKHOUSE_DSN or <data_dir>/clickhouse)"
    ),
    host: str = typer.Option("127.0.0.1", "--host", envvar="AGL_DASHBOARD_HOST", help="address to bind (loopback by default)"),
    port: int = typer.Option(4747, "--port", envvar="AGL_DASHBOARD_PORT", min=0, max=65535, help="port (0: a free one)"),
    token: Optional[str] = typer.Option(
        None, "--token", envvar=TOKEN_ENV, help="the token the page asks for (default: a random one, printed in the URL)"
    ),
    refresh: float = typer.Option(5.0, "--refresh", min=1.0, help="seconds between automatic refreshes of the page"),
) -> None:
    """Serve a web page with the run's overview, rewards, training steps and each rollout's spans.

    Every panel runs the same SQL as the provisioned Grafana dashboard. While a local run owns the
    embedded ClickHouse, the page reads through the processors' read-only SQL door.
    """
    from agl_stream.service import HttpHost, StopDeadline, bound_socket, stop_with_parent
    from agl_stream_processors.clickhouse.client import ClickHouseConfigError
    from agl_stream_processors.dashboard.app import create_app
    from agl_stream_processors.dashboard.source import DataSource

    try:
        source = DataSource(dsn or Settings.from_env().effective_clickhouse_dsn)
    except ClickHouseConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    secret = token or secrets.token_urlsafe(24)
    try:
        sock = bound_socket(host, port)
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1)
    bound = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    typer.echo(f"agl-stream dashboard: http://{shown_host}:{bound}/?token={secret}")
    typer.echo(f"reading {source.describe()['where']}; Ctrl+C stops it")
    sys.stdout.flush()
    if token is None and TOKEN_ENV not in os.environ:
        typer.echo(f"(a random token; set {TOKEN_ENV} or --token to choose one)", err=True)
    deadline = StopDeadline(10.0, name="dashboard")
    stop_with_parent(deadline)  # started by a job: gone, bounded, when the job is
    try:
        HttpHost(create_app(source, secret, refresh_seconds=refresh), host, name="dashboard", sock=sock).run(deadline)
    finally:
        source.close()
