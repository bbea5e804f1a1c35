"""``agl-stream runner --agent module:object``: run an agent on the tasks of ``agl.tasks``.

Parallelism has two levels: ``--n-runners N`` starts N runner *processes* (each its own consumer
in the group ``agl-runners``, own GIL, own exporter thread), ``--concurrency C`` runs up to C
attempts at once inside each process as asyncio tasks (sync agents in threads). Use processes
for CPU-bound agents and concurrency for agents that mostly wait on LLMs or tools.

Ctrl+C / SIGTERM: stop taking tasks, let running attempts finish (``--shutdown-grace``), flush
spans, commit offsets, exit. A second Ctrl-C cancels running attempts (reported failed); a repeated
SIGTERM does not (a supervisor's group signal and its forwarded one arrive together). The whole
stop is bounded (:func:`runner_stop_timeout`): with the broker gone the flush would wait forever, so
the process exits anyway (status 124) once the grace and the flush budget have passed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from agl_stream.config import Settings, SettingsError

logger = logging.getLogger(__name__)

#: seconds a stopping runner gets, after its attempts' grace, to flush spans and commit offsets
FLUSH_BUDGET_S = 10.0


def runner_stop_timeout(shutdown_grace: float) -> float:
    """A runner's graceful stop: the running attempts' grace, then the flush."""
    return shutdown_grace + FLUSH_BUDGET_S


def runner(
    agent: Optional[str] = typer.Option(None, "--agent", help="the agent as module:object (LitAgent, subclass or @rollout function)"),
    components: Optional[Path] = typer.Option(
        None, "--components", help="a components file written by Trainer.fit (agent, tracer and hooks as objects)"
    ),
    n_runners: int = typer.Option(1, "--n-runners", min=1, help="runner processes to start"),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="attempts run at once per process (asyncio tasks)"),
    max_rollouts: Optional[int] = typer.Option(None, "--max-rollouts", min=1, help="stop after this many rollouts (per process)"),
    worker_id: Optional[str] = typer.Option(None, "--worker-id", help="worker id (default Worker-<host>-<pid>)"),
    heartbeat_interval: float = typer.Option(10.0, "--heartbeat-interval", min=0.1, help="seconds between heartbeats"),
    shutdown_grace: float = typer.Option(30.0, "--shutdown-grace", min=0.0, help="seconds running attempts get on stop"),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help="Kafka bootstrap (default AGL_KAFKA_BOOTSTRAP)"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="live progress (default: on a terminal)"),
    log_json: bool = typer.Option(False, "--log-json", help="structured JSON log lines"),
) -> None:
    """Run an agent on agl.tasks; spans go to agl.spans, lifecycle to agl.attempts."""
    if log_json:
        from agl_stream.runner.logs import use_json_logs

        use_json_logs(logging.getLogger().level or logging.INFO)
    settings = Settings.from_env(kafka_bootstrap=bootstrap)
    if not settings.kafka_bootstrap:
        raise SettingsError("the runner needs a broker: set AGL_KAFKA_BOOTSTRAP or pass --bootstrap")
    if (agent is None) == (components is None):
        raise typer.BadParameter("give the agent as --agent module:object or --components FILE (one of them)")
    if n_runners > 1:
        raise typer.Exit(_run_processes(n_runners, worker_id, shutdown_grace))
    lit_agent, extra = _load(agent, components)
    asyncio.run(
        run_agent(
            lit_agent, settings, concurrency=concurrency, max_rollouts=max_rollouts, worker_id=worker_id,
            heartbeat_interval=heartbeat_interval, shutdown_grace=shutdown_grace, progress=progress, **extra,
        )
    )  # fmt: skip


def _load(agent: Optional[str], components: Optional[Path]) -> tuple[Any, dict[str, Any]]:
    """The agent, plus the tracer and hooks when they came as objects in a components file."""
    from agl_stream.runner.loader import as_agent, load_agent

    if agent is not None:
        return load_agent(agent), {}
    from agl_stream.execution.components import read_components

    assert components is not None
    loaded = read_components(components)
    if "agent" not in loaded:
        raise typer.BadParameter(f"{components} holds no agent")
    extra: dict[str, Any] = {}
    if loaded.get("tracer") is not None:
        extra["tracer"] = loaded["tracer"]
    if loaded.get("hooks"):
        extra["hooks"] = list(loaded["hooks"])
    return as_agent(loaded["agent"], str(components)), extra


async def run_agent(agent: object, settings: Settings, *, progress: Optional[bool], **options: object) -> None:
    """Run ``agent`` as one runner process until SIGINT/SIGTERM (the runner CLI and the controller CLI)."""
    from agl_stream.runner.stats import progress_wanted, show_progress
    from agl_stream.runner.runner import LitAgentRunner

    from agl_stream.service import StopDeadline, StopSignals, stop_with_parent

    runner_ = LitAgentRunner(agent, settings, **options)  # type: ignore[arg-type]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    deadline = StopDeadline(runner_stop_timeout(float(options.get("shutdown_grace", 30.0))), name="runner")  # type: ignore[arg-type]
    stop_with_parent(deadline)  # started by a supervisor: its death reaches on_signal below as SIGTERM

    def stop_taking_tasks() -> None:
        logger.info("%s: no new tasks; finishing running attempts (Ctrl-C again to cancel them)",
                    signal.Signals(signals.received or signal.SIGTERM).name)  # fmt: skip
        stop.set()

    def cancel_attempts() -> None:
        logger.warning("SIGINT again: cancelling running attempts")
        runner_.force_stop.set()

    signals = StopSignals(stop_taking_tasks, deadline, on_again=cancel_attempts)
    signals.install_on_loop(loop)
    display_done = asyncio.Event()
    display = (
        asyncio.create_task(show_progress(runner_.stats, display_done, runner_.max_rollouts))
        if progress_wanted(progress)
        else None
    )
    try:
        await runner_.run(stop)
    finally:
        display_done.set()
        if display is not None:
            await display


def _run_processes(n: int, worker_id: Optional[str], shutdown_grace: float) -> int:
    """Start ``n`` single-process runners with the same arguments; forward signals; return the worst exit code.

    Each child dies with this process (parent-death signal), and this process's stop is bounded by the
    children's own bound plus a margin."""
    from agl_stream.service import KILL_MARGIN_S, STOP_WITH_PARENT_ENV, StopDeadline, StopSignals, die_with_parent

    args = _strip_option(sys.argv[1:], "--n-runners")
    args = _strip_option(args, "--worker-id")
    base = worker_id or "Worker"
    children = []
    for index in range(n):
        cmd = [sys.executable, "-m", "agl_stream.cli.main", *args, "--n-runners", "1", "--worker-id", f"{base}-{index}"]
        children.append(subprocess.Popen(cmd, env={**os.environ, STOP_WITH_PARENT_ENV: "1"}, preexec_fn=die_with_parent(os.getpid())))
    deadline = StopDeadline(runner_stop_timeout(shutdown_grace) + KILL_MARGIN_S, name="runners")

    def forward(signum: int) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # the first signal goes to every child; a second Ctrl-C too (each child then cancels its attempts)
    signals = StopSignals(lambda: forward(signals.received or signal.SIGTERM), deadline,
                          on_again=lambda: forward(signal.SIGINT))  # fmt: skip
    signals.install()
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


def _strip_option(args: list[str], name: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == name:
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        out.append(arg)
    return out
