"""``agl-stream processors``: a registry of named async apps run together with one lifecycle.

An app is anything with ``name``, ``async run(stop: asyncio.Event)`` (returns when ``stop`` is set)
and ``health() -> Mapping``. The service starts the selected apps, reports their health every
``health_interval`` seconds (log line, optional JSON file for probes, optional callback), stops
them all on SIGINT/SIGTERM (or when one of them crashes: a crashed app makes the service exit
non-zero so a supervisor restarts it and the uncommitted records are replayed), and waits up to
``shutdown_timeout`` for them to finish their in-flight work before cancelling.

Apps are registered by dotted path so ``agl-stream processors triplets`` never imports faust or
ClickHouse code it does not run.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from agl_stream.config import Settings

logger = logging.getLogger(__name__)


class ProcessorApp(Protocol):
    name: str

    async def run(self, stop: asyncio.Event) -> Any: ...

    def health(self) -> Mapping[str, Any]: ...


#: factory(settings, options) -> app; options are the service's CLI options (each app reads its own)
AppFactory = Callable[[Settings, Mapping[str, Any]], ProcessorApp]

#: app name -> "module:factory"
REGISTRY: dict[str, str] = {
    "state-machine": "agl_stream_processors.service:state_machine_app",
    "triplets": "agl_stream_processors.service:triplets_app",
    "sinks": "agl_stream_processors.service:sinks_app",
}


def state_machine_app(settings: Settings, options: Mapping[str, Any]) -> ProcessorApp:
    from agl_stream_processors.state_machine.app import RolloutStateMachine, StateMachineOptions

    defaults = StateMachineOptions()
    return RolloutStateMachine(
        settings,
        StateMachineOptions(
            retention_seconds=options.get("retention_seconds") or defaults.retention_seconds,
            scan_interval=options.get("scan_interval") or defaults.scan_interval,
            # with Kafka transactions on, the state machine's writes commit with its input offsets too
            processing_guarantee="exactly_once" if settings.kafka_transactions else defaults.processing_guarantee,
        ),
    )


def triplets_app(settings: Settings, options: Mapping[str, Any]) -> ProcessorApp:
    from agl_stream_processors.triplets import TripletProcessor, TripletProcessorOptions

    defaults = TripletProcessorOptions()
    return TripletProcessor(
        settings,
        adapter=options.get("adapter") or "tracer",
        options=TripletProcessorOptions(
            grace_seconds=options.get("grace_seconds") or defaults.grace_seconds,
            orphan_seconds=options.get("orphan_seconds") or defaults.orphan_seconds,
        ),
    )


def sinks_app(settings: Settings, options: Mapping[str, Any]) -> ProcessorApp:
    from agl_stream_processors.sinks.service import SinkService
    from agl_stream_processors.sinks.sink import SinkOptions

    batch_size = options.get("sink_batch_size")
    service = SinkService(
        settings, options=SinkOptions(batch_size=batch_size) if batch_size else SinkOptions(), door=options.get("sql_door")
    )
    service.name = "sinks"  # type: ignore[attr-defined]
    return service  # type: ignore[return-value]


def resolve(names: Optional[Sequence[str]] = None, registry: Mapping[str, str] = REGISTRY) -> list[str]:
    """The app names to run (all registered ones when none are given); unknown names raise ValueError."""
    if not names:
        return list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ValueError(f"unknown processor app(s) {unknown}; known: {sorted(registry)}")
    return list(dict.fromkeys(names))


def load_factory(name: str, registry: Mapping[str, str] = REGISTRY) -> AppFactory:
    module_name, _, attr = registry[name].partition(":")
    factory: AppFactory = getattr(importlib.import_module(module_name), attr)
    return factory


class ProcessorService:
    def __init__(
        self,
        settings: Settings,
        names: Optional[Sequence[str]] = None,
        *,
        options: Optional[Mapping[str, Any]] = None,
        apps: Optional[Sequence[ProcessorApp]] = None,
        health_interval: float = 10.0,
        health_file: Optional[Path] = None,
        on_health: Optional[Callable[[dict[str, Any]], None]] = None,
        shutdown_timeout: float = 30.0,
    ) -> None:
        self.settings = settings
        if apps is None:
            options = options or {}
            apps = [load_factory(name)(settings, options) for name in resolve(names)]
        self.apps = list(apps)
        self.health_interval = health_interval
        self.health_file = health_file
        self.on_health = on_health
        self.shutdown_timeout = shutdown_timeout
        self.started_at = time.time()
        self.failed: dict[str, BaseException] = {}

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"uptime_s": round(time.time() - self.started_at, 1), "apps": {}}
        for app in self.apps:
            try:
                status = "failed" if app.name in self.failed else "running"
                report["apps"][app.name] = {"status": status, **app.health()}
            except Exception as exc:  # a broken health() must not take the service down
                report["apps"][app.name] = {"status": "unknown", "health_error": repr(exc)}
        for name, exc in self.failed.items():
            report["apps"].setdefault(name, {})["error"] = repr(exc)
        return report

    def _report(self) -> None:
        report = self.health()
        logger.info("health %s", json.dumps(report, default=str, sort_keys=True))
        if self.health_file is not None:
            tmp = self.health_file.with_suffix(self.health_file.suffix + ".tmp")
            tmp.write_text(json.dumps(report, default=str, indent=2, sort_keys=True))
            os.replace(tmp, self.health_file)
        if self.on_health is not None:
            self.on_health(report)

    async def run(self, stop: asyncio.Event) -> int:
        """Run every app until ``stop`` is set or one fails; 0 on a clean stop, 1 if an app failed."""
        app_stop = asyncio.Event()
        tasks = {asyncio.create_task(app.run(app_stop), name=f"app-{app.name}"): app for app in self.apps}
        logger.info("processors: running %s", ", ".join(app.name for app in self.apps))
        stop_wait = asyncio.create_task(stop.wait())
        try:
            next_health = time.monotonic() + self.health_interval
            while True:
                timeout = max(0.0, next_health - time.monotonic())
                done, _ = await asyncio.wait({stop_wait, *tasks}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                finished = [t for t in done if t in tasks]
                for task in finished:
                    app = tasks.pop(task)
                    exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
                    self.failed[app.name] = exc or RuntimeError(f"{app.name} returned before it was asked to stop")
                    logger.error(
                        "processors: %s stopped unexpectedly: %r; shutting down", app.name, self.failed[app.name]
                    )
                if finished or stop_wait in done:
                    break
                self._report()
                next_health = time.monotonic() + self.health_interval
        finally:
            stop_wait.cancel()
            app_stop.set()
            await self._drain(tasks)
            self._report()
        return 1 if self.failed else 0

    async def _drain(self, tasks: dict["asyncio.Task[Any]", ProcessorApp]) -> None:
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=self.shutdown_timeout)
        for task in pending:
            name = tasks[task].name
            logger.error("processors: %s did not stop within %.0fs; cancelling", name, self.shutdown_timeout)
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                app = tasks[task]
                self.failed[app.name] = task.exception()  # type: ignore[assignment]
                logger.error("processors: %s failed while stopping: %r", app.name, task.exception())
