"""``agl-stream processors`` with one process per app: the state machine, the triplet adapter and the
ClickHouse sinks each get their own interpreter, so they use separate cores and their memory does
not add up in one process (the embedded ClickHouse engine alone takes about 300 MB).

The supervisor starts every selected app as ``agl-stream processors APP`` with the same options,
in its own process group (a SIGKILL of the service takes every app down, as a crash of the one
process used to), and keeps the service's contract:

* one health report with every app under ``apps`` (merged from each child's health file, plus the
  child's pid), written to ``--health-file`` and served on ``--health-port``;
* an app that exits on its own stops the others and makes the service exit non-zero (the apps'
  uncommitted records are replayed when a supervisor restarts it);
* SIGTERM/SIGINT stop every app gracefully (each has ``--shutdown-timeout`` to finish in-flight work);
* a supervisor that dies without stopping them (SIGKILL, OOM kill) takes its apps with it: on Linux
  each child asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so no app
  goes on consuming as an orphan.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from agl_stream.service import STOP_WITH_PARENT_ENV, die_with_parent, stop_bound

logger = logging.getLogger(__name__)

#: environment for the app that owns the embedded ClickHouse engine (docs/performance.md, "The sinks' memory").
#: One jemalloc arena and no thread caches inside chdb: about 150 MB less peak RSS on the benchmark.
#: Returning freed pages at once as well (``dirty_decay_ms:0,muzzy_decay_ms:0``) costs ~2 ms of kernel
#: time per rollout in page faults (sinks 4.7 -> 6.8 ms/rollout); a 1 s decay changed neither RSS nor
#: CPU measurably. pyarrow's default pool (mimalloc) kept 60-100 MB more at peak than the system
#: allocator for the sinks' short-lived arrow batches, at no measurable CPU. A variable already set
#: in the environment wins.
SINKS_ENV = {"JE_MALLOC_CONF": "narenas:1,tcache:false", "ARROW_DEFAULT_MEMORY_POOL": "system"}


@dataclass
class AppProcess:
    name: str
    argv: list[str]
    health_file: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: Optional["subprocess.Popen[bytes]"] = None
    last_report: dict[str, Any] = field(default_factory=dict)

    def start(self) -> None:
        self.health_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(self.argv, env={**os.environ, STOP_WITH_PARENT_ENV: "1", **self.env},
                                     preexec_fn=die_with_parent(os.getpid()))  # fmt: skip

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.poll() if self.proc is not None else None

    def read_health(self) -> dict[str, Any]:
        try:
            self.last_report = json.loads(self.health_file.read_text())
        except (OSError, ValueError):
            pass  # not written yet, or being replaced: keep the previous report
        return self.last_report

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass


def app_argv(name: str, args: Sequence[str], health_file: Path, health_interval: float) -> list[str]:
    """``agl-stream processors NAME`` with the service's own options (the app reads those it knows)."""
    return [sys.executable, "-m", "agl_stream.cli.main", "processors", name, *args, "--health-file", str(health_file),
            "--health-interval", str(health_interval)]  # fmt: skip


class ProcessSupervisor:
    """Runs each app in a child process; ``run(stop)`` and ``health()`` like :class:`ProcessorService`."""

    def __init__(
        self,
        names: Sequence[str],
        args: Sequence[str],
        *,
        state_dir: Path,
        health_interval: float = 10.0,
        health_file: Optional[Path] = None,
        shutdown_timeout: float = 30.0,
        app_env: Optional[Mapping[str, Mapping[str, str]]] = None,
    ) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        # each child reports as often as the service would (its first report says it runs: the merged
        # file appears only then, as a single-process service's does)
        child_interval = health_interval
        envs = {"sinks": dict(SINKS_ENV), **{k: dict(v) for k, v in (app_env or {}).items()}}
        self.apps = [
            AppProcess(name, app_argv(name, args, state_dir / f"{name}.health.json", child_interval),
                       state_dir / f"{name}.health.json", {k: v for k, v in envs.get(name, {}).items() if k not in os.environ})
            for name in names
        ]  # fmt: skip
        self.health_interval = health_interval
        self.health_file = health_file
        self.shutdown_timeout = shutdown_timeout
        self.started_at = time.time()
        self.failed: dict[str, str] = {}
        self._last_seen: tuple[str, ...] = ()

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"uptime_s": round(time.time() - self.started_at, 1), "apps": {}, "processes": {}}
        for app in self.apps:
            child = app.read_health().get("apps", {}).get(app.name)
            status = "failed" if app.name in self.failed else ("running" if child is not None else "starting")
            report["apps"][app.name] = {**(child or {}), "status": child.get("status", status) if child else status}
            if app.name in self.failed:
                report["apps"][app.name]["status"] = "failed"
                report["apps"][app.name]["error"] = self.failed[app.name]
            report["processes"][app.name] = {"pid": app.proc.pid if app.proc else None, "exit_code": app.returncode}
        return report

    def _report(self, force: bool = False) -> None:
        report = self.health()
        started = all(app.last_report for app in self.apps)
        seen = tuple(json.dumps(app.last_report, sort_keys=True, default=str) for app in self.apps)
        changed, self._last_seen = seen != self._last_seen, seen
        # rewritten when a child reported (readers count reports, so the same one must not look new)
        if self.health_file is not None and (started or self.failed) and (changed or force):
            # like a single-process service, the file appears once every app runs (callers wait on it)
            tmp = self.health_file.with_suffix(self.health_file.suffix + ".tmp")
            tmp.write_text(json.dumps(report, default=str, indent=2, sort_keys=True))
            os.replace(tmp, self.health_file)

    async def run(self, stop: asyncio.Event) -> int:
        for app in self.apps:
            app.start()
        logger.info("processors: %s, one process each (%s)", ", ".join(a.name for a in self.apps),
                    ", ".join(f"{a.name}={a.proc.pid if a.proc else '?'}" for a in self.apps))  # fmt: skip
        next_log = time.monotonic() + self.health_interval
        try:
            while not stop.is_set():
                exited = [a for a in self.apps if a.returncode is not None]
                if exited:
                    for app in exited:
                        self.failed[app.name] = f"exited with code {app.returncode}"
                        logger.error("processors: %s exited unexpectedly (code %s); stopping the others",
                                     app.name, app.returncode)  # fmt: skip
                    break
                self._report()
                if time.monotonic() >= next_log:
                    logger.info("health %s", json.dumps(self.health(), default=str, sort_keys=True))
                    next_log = time.monotonic() + self.health_interval
                try:
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
                except asyncio.TimeoutError:
                    pass
        finally:
            await self._stop_all()
            self._report(force=True)
        return 1 if self.failed else 0

    async def _stop_all(self) -> None:
        for app in self.apps:
            app.signal(signal.SIGTERM)
        deadline = time.monotonic() + stop_bound(self.shutdown_timeout)  # each app's own deadline, and a margin
        while any(a.returncode is None for a in self.apps) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for app in self.apps:
            if app.returncode is None:
                logger.error("processors: %s did not stop in time; killing it", app.name)
                app.signal(signal.SIGKILL)
                await asyncio.to_thread(app.proc.wait, 10)  # type: ignore[union-attr]
            elif app.returncode != 0 and app.name not in self.failed:
                self.failed[app.name] = f"exited with code {app.returncode} while stopping"
