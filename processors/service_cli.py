"""``agl-stream processors [APP...]``: run the stream processors as one service (all apps by default).

Several apps run one process each (:mod:`agl_stream_processors.supervisor`) unless ``--one-process``
asks for a single event loop (handy under a debugger); one app runs in this process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import typer

from agl_stream.service import KILL_MARGIN_S, STOP_GRACE_S, HealthCheck, HttpHost, health_app, run_until_signal
from agl_stream.config import Settings


def processors(
    names: Optional[list[str]] = typer.Argument(None, help="apps to run (default: all); see --list"),
    list_apps: bool = typer.Option(False, "--list", help="list the registered apps and exit"),
    adapter: str = typer.Option("tracer", help="triplets: adapter spec, e.g. 'tracer:agent_match=write'"),
    components: Optional[Path] = typer.Option(
        None, "--components", help="triplets: use the adapter object in this components file (written by Trainer.fit)"
    ),
    grace_seconds: Optional[float] = typer.Option(None, help="triplets: wait this long for missing spans"),
    orphan_seconds: Optional[float] = typer.Option(
        None, help="triplets: give up on an attempt that never finishes after this long (keep it above the "
        "rollouts' unresponsive_seconds; default 900)"
    ),
    retention_seconds: Optional[float] = typer.Option(None, help="state-machine: keep finished rollouts this long"),
    sink_batch_size: Optional[int] = typer.Option(
        None, min=1, help="sinks: records per insert (default 1000); a sink holds at most two batches"
    ),
    health_interval: float = typer.Option(10.0, help="seconds between health reports"),
    health_file: Optional[Path] = typer.Option(None, help="also write the health report (JSON) to this file"),
    health_port: Optional[int] = typer.Option(None, help="serve GET /health on this port (200 healthy, 503 not)"),
    health_host: str = typer.Option("0.0.0.0", help="address of the health endpoint"),
    shutdown_timeout: float = typer.Option(30.0, help="seconds apps get to finish in-flight work on shutdown"),
    one_process: bool = typer.Option(
        False, "--one-process", help="run several apps in this one process instead of one child process each"
    ),
    sql_door: bool = typer.Option(
        True, "--sql-door/--no-sql-door", help="sinks on the embedded engine: serve read-only SQL to local commands"
    ),
    sql_door_host: Optional[str] = typer.Option(
        None, help="address of the SQL door (env: AGL_SQL_DOOR_HOST; default: 127.0.0.1)"
    ),
    sql_door_port: Optional[int] = typer.Option(
        None, min=0, max=65535, help="port of the SQL door, 0: a free one (env: AGL_SQL_DOOR_PORT; default: 0)"
    ),
) -> None:
    from agl_stream.adapter import build_adapter
    from agl_stream_processors.clickhouse.door_file import DoorOptions
    from agl_stream_processors.gc_tuning import tune_gc
    from agl_stream_processors.service import REGISTRY, ProcessorService, resolve

    if list_apps:
        for name, target in REGISTRY.items():
            typer.echo(f"{name}\t{target}")
        return
    adapter_obj: object = adapter
    try:
        selected = resolve(names)
        if components is not None:
            from agl_stream.execution.components import read_components

            adapter_obj = read_components(components).get("adapter") or adapter
        else:
            build_adapter(adapter)  # fail fast on a bad spec, before anything connects
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = Settings.from_env(sql_door_host=sql_door_host, sql_door_port=sql_door_port)
    sql_door_host, sql_door_port = settings.sql_door_host, settings.sql_door_port
    if not settings.kafka_bootstrap:
        typer.echo("error: set AGL_KAFKA_BOOTSTRAP (or start a local broker with `agl-stream broker`)", err=True)
        raise typer.Exit(2)
    options = {
        "adapter": adapter_obj,
        "grace_seconds": grace_seconds,
        "orphan_seconds": orphan_seconds,
        "retention_seconds": retention_seconds,
        "sink_batch_size": sink_batch_size,
        # the token comes from AGL_SQL_DOOR_TOKEN or is random; either way it is in the door file (0600)
        "sql_door": DoorOptions(host=sql_door_host, port=sql_door_port) if sql_door else None,
    }

    if len(selected) > 1 and not one_process:
        forwarded = _forwarded_options(adapter, components, grace_seconds, orphan_seconds, retention_seconds,
                                       sink_batch_size, shutdown_timeout)  # fmt: skip
        forwarded += ["--sql-door", "--sql-door-host", sql_door_host, "--sql-door-port", str(sql_door_port)] \
            if sql_door else ["--no-sql-door"]  # fmt: skip
        raise typer.Exit(_supervise(settings, selected, forwarded, health_interval, health_file, health_port, health_host,
                                    shutdown_timeout))  # fmt: skip

    async def main(stop: asyncio.Event) -> int:
        service = ProcessorService(
            settings, selected, options=options, health_interval=health_interval, health_file=health_file,
            shutdown_timeout=shutdown_timeout,
        )  # fmt: skip
        tune_gc()  # this process runs the apps (the supervisor's children come here too)
        if health_port is None:
            return await service.run(stop)
        server = await _health_server(service.health, health_host, health_port).start()
        try:
            return await service.run(stop)
        finally:
            await server.stop()

    code = run_until_signal(main, shutdown_timeout=shutdown_timeout, name="processors")
    raise typer.Exit(code)


def apps_running(report: Callable[[], Mapping[str, Any]]) -> HealthCheck:
    """The service is healthy while every app in its report runs (a failed one makes the probes fail)."""

    def check() -> tuple[bool, Mapping[str, Any]]:
        current = report()
        return all(app.get("status") == "running" for app in current.get("apps", {}).values()), current

    return check


def _health_server(report: Callable[[], Mapping[str, Any]], host: str, port: int) -> HttpHost:
    """``GET /health`` for Kubernetes / compose probes, on the service's own loop."""
    return HttpHost(health_app(apps_running(report)), host, port, name="health")


def _forwarded_options(adapter: str, components: Optional[Path], grace_seconds: Optional[float],
                       orphan_seconds: Optional[float], retention_seconds: Optional[float],
                       sink_batch_size: Optional[int], shutdown_timeout: float) -> list[str]:  # fmt: skip
    """The options every app process gets (each app reads the ones it knows)."""
    args = ["--adapter", adapter, "--shutdown-timeout", str(shutdown_timeout)]
    for flag, value in (("--components", components), ("--grace-seconds", grace_seconds),
                        ("--orphan-seconds", orphan_seconds), ("--retention-seconds", retention_seconds),
                        ("--sink-batch-size", sink_batch_size)):  # fmt: skip
        if value is not None:
            args += [flag, str(value)]
    return args


def _supervise(settings: Settings, selected: list[str], forwarded: list[str], health_interval: float,
               health_file: Optional[Path], health_port: Optional[int], health_host: str, shutdown_timeout: float) -> int:  # fmt: skip
    from agl_stream_processors.supervisor import ProcessSupervisor

    # one folder per service for its apps' health files: two services side by side (replicas) must not share one
    state_dir = health_file.with_name(f"{health_file.name}.d") if health_file is not None else settings.data_dir / "processors.d"
    supervisor = ProcessSupervisor(selected, forwarded, state_dir=state_dir, health_interval=health_interval,
                                   health_file=health_file, shutdown_timeout=shutdown_timeout)  # fmt: skip

    async def main(stop: asyncio.Event) -> int:
        if health_port is None:
            return await supervisor.run(stop)
        server = await _health_server(supervisor.health, health_host, health_port).start()
        try:
            return await supervisor.run(stop)
        finally:
            await server.stop()

    # the supervisor waits for its apps' own bound, then SIGKILLs them: its deadline comes after that
    return run_until_signal(main, shutdown_timeout=shutdown_timeout + STOP_GRACE_S + KILL_MARGIN_S, name="processors supervisor")
