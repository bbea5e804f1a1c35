"""``agl-stream broker``: run the local broker in the foreground; ``agl-stream broker install`` fetches Kafka."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer

from agl_stream.broker import BrokerError, KafkaUnavailable, describe, local_broker
from agl_stream.broker._kafka import STOP_TIMEOUT as BROKER_STOP_TIMEOUT
from agl_stream.config import Settings
from agl_stream.service import StopDeadline, StopSignals

app = typer.Typer(no_args_is_help=False, add_completion=False)


@app.callback(invoke_without_command=True)
def broker(
    ctx: typer.Context,
    port: Optional[int] = typer.Option(None, "--port", "-p", help="client port (env: AGL_BROKER_PORT; default: a free one)"),
    brokers: int = typer.Option(1, "--brokers", min=1, max=9, help="KRaft nodes (Apache Kafka only); 3 = replication factor 3"),
    data_dir: Optional[Path] = typer.Option(
        None, "--data-dir",
        help="Kafka's logs and metadata, kept across restarts (env: AGL_BROKER_DATA_DIR; default: <AGL_DATA_DIR>/kafka)",
    ),
    kind: Optional[str] = typer.Option(
        None, "--kind", help="kafka or tansu (env: AGL_LOCAL_BROKER; default: Kafka where Java 17+ is here, else Tansu)"
    ),
) -> None:
    """Start the local broker on loopback, print its bootstrap address, and stop it on Ctrl+C / SIGTERM.

    Exit codes: 0 stopped cleanly, 1 the broker exited by itself, 2 bad settings or Kafka asked for
    where it cannot run."""
    if ctx.invoked_subcommand is not None:
        return
    if kind not in (None, "kafka", "tansu"):
        raise typer.BadParameter(f"{kind!r} is not kafka or tansu", param_hint="--kind / AGL_LOCAL_BROKER")
    settings = Settings.from_env(local_broker=kind, broker_port=port, broker_data_dir=data_dir)
    port, data_dir = settings.broker_port, settings.broker_data_dir
    # Ctrl+C / SIGTERM stop the broker: its own stop SIGKILLs a node after its timeout; the deadline bounds the rest.
    # The handler only records the signal (StopSignals.wait): a threading.Event set from it deadlocked once in ~100
    # stops under load, when the signal landed while the main thread held the Event's lock inside its wait.
    signals = StopSignals(lambda: None, StopDeadline(BROKER_STOP_TIMEOUT, name="broker"))
    signals.install()
    try:
        local = local_broker(settings, port=port, brokers=brokers, data_dir=data_dir or settings.data_dir / "kafka")
        began = time.monotonic()
        local.start()
    except KafkaUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    with local:
        typer.echo(f"AGL_KAFKA_BOOTSTRAP={local.bootstrap}", color=False)
        typer.echo(f"{describe(local)}: ready in {time.monotonic() - began:.1f} s", err=True)
        sys.stdout.flush()
        while not signals.wait(0.5):
            if not local.running:
                typer.echo("broker exited unexpectedly", err=True)
                raise typer.Exit(1)
    typer.echo("broker stopped", err=True)


@app.command("install")
def install(
    home: Optional[Path] = typer.Option(None, "--home", help="where the jars go (env: AGL_KAFKA_HOME; default: the user cache)"),
    optional: bool = typer.Option(
        False, "--optional", help="exit 0 with the Tansu notice when Java or Maven is missing (make uses this)"
    ),
) -> None:
    """Fetch Apache Kafka's pinned jars from Maven Central (needs Maven and Java 17+; once per machine)."""
    from agl_stream.broker._install import fetch_for_setup

    try:
        fetch_for_setup(home or Settings.from_env().kafka_home, optional=optional, echo=typer.echo)
    except KafkaUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
