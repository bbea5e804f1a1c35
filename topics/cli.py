"""``agl-stream topics create|list|describe``."""

from __future__ import annotations

import asyncio
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from agl_stream.config import Settings
from agl_stream_topics.admin import describe_topics, ensure_topics
from agl_stream_topics.catalog import CATALOG

app = typer.Typer(no_args_is_help=True)
console = Console()

BootstrapOpt = typer.Option(None, "--bootstrap", "-b", help="Kafka host:port (env: AGL_KAFKA_BOOTSTRAP)")
PartitionsOpt = typer.Option(None, "--partitions", help="partitions of rollout-keyed topics (env: AGL_PARTITIONS; default: 4)")


def _settings(bootstrap: Optional[str], partitions: Optional[int] = None) -> Settings:
    settings = Settings.from_env(kafka_bootstrap=bootstrap, partitions=partitions)
    if not settings.kafka_bootstrap:
        console.print("[red]no broker: pass --bootstrap or set AGL_KAFKA_BOOTSTRAP (start one with `agl-stream broker`)")
        raise typer.Exit(2)
    return settings


@app.command("create")
def create(bootstrap: Optional[str] = BootstrapOpt, partitions: Optional[int] = PartitionsOpt) -> None:
    """Create missing topics; verify existing ones (exit code 1 on a mismatch)."""
    settings = _settings(bootstrap, partitions)
    report = asyncio.run(ensure_topics(settings))
    for state in report.topics:
        mark = "[green]created" if state.created else ("[green]ok" if state.ok else "[red]MISMATCH")
        console.print(f"{mark}[/] {state.name}  partitions={state.partitions} cleanup={state.cleanup_policy}")
        for problem in state.problems:
            console.print(f"    [red]{problem}")
    if not report.ok:
        raise typer.Exit(1)


@app.command("list")
def list_(bootstrap: Optional[str] = BootstrapOpt) -> None:
    """List the catalog topics that exist on the broker."""
    settings = _settings(bootstrap)
    for state in asyncio.run(describe_topics(settings)):
        if state.partitions is not None:
            typer.echo(state.name)


@app.command("describe")
def describe(bootstrap: Optional[str] = BootstrapOpt, partitions: Optional[int] = PartitionsOpt) -> None:
    """Show each catalog topic: key, value, partitions and cleanup policy, expected vs actual."""
    settings = _settings(bootstrap, partitions)
    states = {s.name: s for s in asyncio.run(describe_topics(settings))}
    table = Table("topic", "key", "value", "partitions", "cleanup", "status")
    for spec in CATALOG:
        st = states[spec.name(settings)]
        exists = st.partitions is not None
        ok = exists and st.partitions == st.expected_partitions and st.cleanup_policy in (None, spec.cleanup_policy)
        table.add_row(
            st.name,
            spec.key,
            spec.value_model.__name__,
            f"{st.partitions if exists else '-'} (want {st.expected_partitions})",
            f"{st.cleanup_policy or '-'} (want {spec.cleanup_policy})",
            "[green]ok" if ok else ("[yellow]missing" if not exists else "[red]mismatch"),
        )
    console.print(table)


@app.command("trim")
def trim(
    bootstrap: Optional[str] = BootstrapOpt,
    every: float = typer.Option(0.0, "--every", min=0.0, help="run as a service, a pass every SECONDS (0: one pass)"),
    min_age: float = typer.Option(300.0, "--min-age", min=0.0, help="never trim records younger than SECONDS"),
) -> None:
    """Delete the delete-policy topics' records that every consumer group has committed past (Apache Kafka).

    The local stack runs this every 30 s against its own broker; see agl_stream_topics.trim."""
    from agl_stream.service import run_until_signal
    from agl_stream_topics.trim import describe as describe_trimmed
    from agl_stream_topics.trim import trim_committed, trim_forever

    settings = _settings(bootstrap)
    if every > 0:
        raise typer.Exit(run_until_signal(lambda stop: trim_forever(settings, stop, every=every, min_age=min_age),
                                          shutdown_timeout=10.0, name="topics trim"))
    typer.echo(describe_trimmed(asyncio.run(trim_committed(settings, min_age=min_age))))
