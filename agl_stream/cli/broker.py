"""``agl-stream broker``: run the local Tansu broker in the foreground."""

from __future__ import annotations

import signal
import threading
from typing import Optional

import typer

from agl_stream.broker import DEFAULT_STORAGE, LocalBroker


def broker(
    port: Optional[int] = typer.Option(None, "--port", "-p", envvar="AGL_BROKER_PORT", help="port (default: a free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="listen address (loopback by default)"),
    storage: str = typer.Option(DEFAULT_STORAGE, "--storage", envvar="AGL_BROKER_STORAGE", help="Tansu storage engine URL"),
) -> None:
    """Start the broker, print its bootstrap address, and stop it cleanly on Ctrl+C / SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalBroker(port=port, host=host, storage_engine=storage) as local:
        typer.echo(f"AGL_KAFKA_BOOTSTRAP={local.bootstrap}", color=False)
        try:
            while not stop.wait(0.5):
                if not local.running:
                    typer.echo("broker exited unexpectedly", err=True)
                    raise typer.Exit(1)
        except KeyboardInterrupt:
            pass
    typer.echo("broker stopped")
