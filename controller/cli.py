"""``agl-stream controller -- COMMAND [ARGS]...``: run any executable once per attempt of ``agl.tasks``.

It takes tasks like a runner (the consumer group ``agl-runners``; start replicas to scale), and each claimed
attempt runs the command (see :mod:`agl_stream_controller.agent` for what the command gets). Exit status:
0 after a clean stop, 124 when the stop ran past its bound (as the runner), 2 for bad arguments.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from agl_stream.config import Settings, SettingsError


def controller(
    command: Optional[list[str]] = typer.Argument(None, help="the agent's command and arguments, after --"),
    spec_file: Optional[Path] = typer.Option(None, "--spec", help="a CommandSpec as JSON (instead of the options below)"),
    agent_class: Optional[str] = typer.Option(None, "--agent-class", help="instead of a command: a Python agent class (module:Class or package.module.Class) run as upstream v1.0's local controller runs local.agent_class, in this Python"),
    cwd: Optional[Path] = typer.Option(None, "--cwd", help="the folder the command runs in (with --agent-class: where its module is found)"),
    env_map: Optional[list[str]] = typer.Option(None, "--env-map", help="NAME=path in the task, e.g. QUESTION=input.question (repeat)"),
    fixed_env: Optional[list[str]] = typer.Option(None, "--env", help="NAME=VALUE for every attempt, e.g. AGENT_MODEL=smollm2 (repeat)"),
    task_file_env: str = typer.Option("AGL_TASK_FILE", "--task-file-env", help="variable naming the task's JSON file ('' for none)"),
    stdin: bool = typer.Option(False, "--stdin/--no-stdin", help="also write the task as JSON to the command's stdin"),
    argv_template: bool = typer.Option(False, "--template-args", help="fill {path.in.task} in the command's arguments, e.g. {input.question} (no shell: each stays one argument)"),
    check: Optional[str] = typer.Option(None, "--check", help="a program and its arguments (split into words as a shell would; no shell runs it), run after the agent exits 0 with AGL_OUTPUT_FILE, AGL_TASK_FILE and AGL_REWARD_FILE: it writes the reward or prints it last"),
    check_timeout: float = typer.Option(60.0, "--check-timeout", min=0.001, help="seconds the check may take"),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.001, help="seconds an attempt may run"),
    kill_grace: float = typer.Option(5.0, "--kill-grace", min=0.0, help="seconds between SIGTERM and SIGKILL at the timeout"),
    cpu_seconds: Optional[int] = typer.Option(None, "--cpu-seconds", min=1, help="CPU seconds an attempt may use"),
    memory_mb: Optional[int] = typer.Option(None, "--memory-mb", min=1, help="address space an attempt may use, in MiB"),
    open_files: Optional[int] = typer.Option(None, "--open-files", min=1, help="files an attempt may hold open"),
    log_cap_bytes: int = typer.Option(1 << 20, "--log-cap-bytes", min=1024, help="output kept per attempt"),
    proxy_url: Optional[str] = typer.Option(None, "--proxy-url", help="the LLM proxy (env: AGL_CONTROLLER_PROXY_URL; default: http://127.0.0.1:4000)"),
    logs_dir: Optional[Path] = typer.Option(None, "--logs-dir", help="attempts' output (env: AGL_CONTROLLER_LOGS_DIR; default: <data dir>/controller)"),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="attempts run at once"),
    max_rollouts: Optional[int] = typer.Option(None, "--max-rollouts", min=1, help="stop after this many rollouts"),
    worker_id: Optional[str] = typer.Option(None, "--worker-id", help="worker id (default Worker-<host>-<pid>)"),
    heartbeat_interval: float = typer.Option(10.0, "--heartbeat-interval", min=0.1, help="seconds between heartbeats"),
    shutdown_grace: float = typer.Option(30.0, "--shutdown-grace", min=0.0, help="seconds running attempts get on stop"),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help="Kafka bootstrap (env: AGL_KAFKA_BOOTSTRAP)"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="live progress (default: on a terminal)"),
    job_template: Optional[Path] = typer.Option(None, "--job-template", help="run each attempt as a Kubernetes Job made from this batch/v1 Job manifest (YAML or JSON); the command becomes its first container's"),
    namespace: str = typer.Option("default", "--namespace", help="Kubernetes: the Jobs' namespace"),
    job_ttl: int = typer.Option(3600, "--job-ttl", min=0, help="Kubernetes: seconds a finished Job is kept (ttlSecondsAfterFinished)"),
    kube_api: Optional[str] = typer.Option(None, "--kube-api", help="Kubernetes: the API server's URL (default: in-cluster, else the kubeconfig)"),
    kube_token_file: Optional[Path] = typer.Option(None, "--kube-token-file", help="Kubernetes: a file holding a bearer token for --kube-api"),
) -> None:
    """Run a command (any executable) once per attempt; its model calls go through the LLM proxy."""
    from agl_stream.runner.cli import run_agent
    from agl_stream_controller.agent import CommandAgent
    from agl_stream_controller.kubernetes import JobLauncher, KubernetesOptions
    from agl_stream_controller.spec import CommandSpec

    settings = Settings.from_env(kafka_bootstrap=bootstrap, controller_proxy_url=proxy_url, controller_logs_dir=logs_dir)
    if not settings.kafka_bootstrap:
        raise SettingsError("the controller needs a broker: set AGL_KAFKA_BOOTSTRAP or pass --bootstrap")
    if spec_file is not None:
        if command:
            raise typer.BadParameter("give the command either after -- or in --spec, not both")
        spec = CommandSpec.model_validate(json.loads(spec_file.read_text()))
    elif command and agent_class:
        raise typer.BadParameter("give either a command after -- or --agent-class, not both")
    elif not command and not agent_class:
        raise typer.BadParameter("no command: agl-stream controller [OPTIONS] -- COMMAND [ARGS]...")
    else:
        if agent_class:  # a pod has its own Python, found on its PATH
            command = ["python" if job_template else sys.executable, "-m", "agl_stream_controller.python_agent", agent_class]
        spec = CommandSpec.model_validate({
            "argv": command, "cwd": cwd, "env": _pairs(fixed_env or [], "--env", "NAME=VALUE"),
            "input": {"env_map": _pairs(env_map or []), "json_file_env": task_file_env or None, "stdin": stdin,
                      "argv_template": argv_template},
            "check": shlex.split(check) if check else None, "check_timeout_seconds": check_timeout,
            "limits": {"timeout_seconds": timeout, "kill_grace_seconds": kill_grace, "cpu_seconds": cpu_seconds,
                       "memory_bytes": memory_mb << 20 if memory_mb else None, "open_files": open_files},
            "log_cap_bytes": log_cap_bytes,
        })  # fmt: skip
    jobs = None
    if job_template is not None:
        if spec.input.stdin:
            raise typer.BadParameter("--stdin cannot reach a Kubernetes Job; the task is in AGL_TASK_JSON")
        jobs = JobLauncher(KubernetesOptions(
            template=_manifest(job_template), namespace=namespace, ttl_seconds=job_ttl, api_url=kube_api,
            api_token=kube_token_file.read_text().strip() if kube_token_file is not None else None))  # fmt: skip
    agent = CommandAgent(spec, proxy_url=settings.controller_proxy_url, key=settings.ingest_token,
                         key_secret=settings.attempt_key_secret, jobs=jobs,
                         logs_dir=settings.controller_logs_dir or settings.data_dir / "controller")  # fmt: skip

    async def serve() -> None:
        try:
            await run_agent(agent, settings, concurrency=concurrency, max_rollouts=max_rollouts, worker_id=worker_id,
                            heartbeat_interval=heartbeat_interval, shutdown_grace=shutdown_grace, progress=progress)  # fmt: skip
        finally:
            if jobs is not None:
                await jobs.close()

    asyncio.run(serve())


def _manifest(path: Path) -> dict[str, Any]:
    """A Job template file (YAML, of which JSON is a part), checked enough to fail at start, not per attempt."""
    import yaml

    from agl_stream_controller.kubernetes import JobTemplateError, build_job

    try:
        template = yaml.safe_load(path.read_text())
        build_job(template, name="check", rollout_id="r", attempt_id="a", env={}, timeout_seconds=None, ttl_seconds=0)
    except (OSError, yaml.YAMLError, JobTemplateError, AttributeError, TypeError) as exc:
        raise typer.BadParameter(f"--job-template {path}: {exc}") from None
    return template  # type: ignore[no-any-return]


def _pairs(items: list[str], option: str = "--env-map", shape: str = "NAME=path.in.task") -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or (not value and option == "--env-map"):
            raise typer.BadParameter(f"{option} takes {shape}, not {item!r}")
        pairs[name] = value
    return pairs
