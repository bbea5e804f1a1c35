"""``agl-stream dashboard``: serve the run dashboard on this machine."""

from __future__ import annotations

import secrets
import sys
from typing import Optional

import typer

from agl_stream.config import Settings



def dashboard(
    dsn: Optional[str] = typer.Option(
        None, "--dsn", help="chdb:///dir or http(s)://user:pass@host:8123/db (default: AGL_CLICKHOUSE_DSN or <data_dir>/clickhouse)"
    ),
    host: Optional[str] = typer.Option(
        None, "--host", help="address to bind (env: AGL_DASHBOARD_HOST; default: 127.0.0.1, loopback)"
    ),
    port: Optional[int] = typer.Option(
        None, "--port", min=0, max=65535, help="port, 0: a free one (env: AGL_DASHBOARD_PORT; default: 4747)"
    ),
    token: Optional[str] = typer.Option(
        None, "--token", help="the token the page asks for (env: AGL_DASHBOARD_TOKEN; default: a random one, in the URL)"
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

    settings = Settings.from_env(dashboard_host=host, dashboard_port=port, dashboard_token=token)
    host, port = settings.dashboard_host, settings.dashboard_port
    try:
        source = DataSource(dsn or settings.effective_clickhouse_dsn)
    except ClickHouseConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    secret = settings.dashboard_token or secrets.token_urlsafe(24)
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
    if settings.dashboard_token is None:
        typer.echo("(a random token; set AGL_DASHBOARD_TOKEN or --token to choose one)", err=True)
    deadline = StopDeadline(10.0, name="dashboard")
    stop_with_parent(deadline)  # started by a job: gone, bounded, when the job is
    try:
        HttpHost(create_app(source, secret, refresh_seconds=refresh), host, name="dashboard", sock=sock).run(deadline)
    finally:
        source.close()
