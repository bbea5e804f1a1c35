"""The local stack: start on this machine whatever a training job needs and is not already running.

With no ``AGL_KAFKA_BOOTSTRAP`` the job is local: a broker (Apache Kafka, or Tansu where Java is
missing; see ``agl_stream.broker``), the catalog topics, and the stream
processors (state machine, triplet adapter, ClickHouse sinks owning the embedded ClickHouse) are
started here and torn down at the end. The local Kafka keeps its data in ``<data_dir>/kafka`` while
the job runs (a broker restart keeps it) and starts afresh with the next job, as Tansu did; the
history stays in ClickHouse. With a cluster configured, only topics are verified: the
processors are the cluster's own services. ``start_dashboard`` adds ``agl-stream dashboard`` (the
run's web page), which reads the embedded ClickHouse through the processors' SQL door.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import Optional, Sequence, Union

from agl_stream.broker import BrokerError, LocalBroker, describe, local_broker
from agl_stream.config import Settings, env_name
from agl_stream.service import ServiceProcess, agl_command, die_with_parent

logger = logging.getLogger(__name__)

DASHBOARD_PORT = 4747  # upstream's dashboard port; another free one when it is taken
#: settings every child service gets explicitly, whatever the parent's environment holds
CHILD_SETTINGS = ("kafka_bootstrap", "topic_prefix", "partitions", "replication_factor", "data_dir", "kafka_session_timeout_ms",
                  "log_level", "kafka_idempotence", "kafka_transactions", "topic_profile", "clickhouse_max_memory_mb")  # fmt: skip


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _printed_url(log: Optional[Path]) -> Optional[str]:
    """The URL ``agl-stream dashboard`` prints once it listens."""
    if log is None or not log.exists():
        return None
    match = re.search(r"agl-stream dashboard: (http://\S+)", log.read_text(errors="replace"))
    return match.group(1) if match else None


class LocalStack:
    def __init__(
        self,
        settings: Settings,
        *,
        processors: Optional[bool] = None,
        processor_args: Sequence[str] = (),
        log_dir: Optional[Path] = None,
    ) -> None:
        self.base_settings = settings
        self.local = not settings.kafka_bootstrap
        self.start_processors = self.local if processors is None else processors
        self.processor_args = list(processor_args)
        self.log_dir = log_dir or settings.data_dir / "logs"
        self.broker: Optional[LocalBroker] = None
        self.services: list[ServiceProcess] = []
        self.dashboard: Optional[ServiceProcess] = None  # optional: not among the services a job needs
        self.settings = settings

    def env(self) -> dict[str, str]:
        """The settings as ``AGL_*`` variables for child services (``Settings.to_env``), the ones that describe the
        job always, and the ClickHouse DSN the job uses."""
        env = self.settings.to_env(always=CHILD_SETTINGS)
        env[env_name("clickhouse_dsn")] = self.settings.effective_clickhouse_dsn
        return env

    async def start(self) -> Settings:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.local:
            kafka_dir = self.settings.data_dir / "kafka"
            shutil.rmtree(kafka_dir, ignore_errors=True)  # the job's own broker: a fresh log, as Tansu's memory was
            broker = local_broker(self.settings, log_file=self.log_dir / "broker.log", data_dir=kafka_dir)
            if broker.kind != "kafka" and self.settings.kafka_transactions:
                raise BrokerError("AGL_KAFKA_TRANSACTIONS needs Apache Kafka; the local broker is Tansu, "
                                  "which refuses transactional producers")  # fmt: skip
            self.broker = broker.start()
            update: dict[str, object] = {"kafka_bootstrap": self.broker.bootstrap}
            if self.broker.kind == "kafka":
                update["topic_profile"] = "local"  # small segments, compaction in minutes, trimmed once read
            else:
                update["kafka_idempotence"] = False  # Tansu answers InitProducerId with an error
            self.settings = self.settings.model_copy(update=update)
            logger.info("started the local broker: %s", describe(self.broker))
        await self._create_topics()
        if self.local and self.broker is not None and self.broker.kind == "kafka":
            # the local disk holds the backlog, not the history: records every reader has committed past go once
            # they are 2 minutes old (every reader of a local job starts with it; the disk's plateau is the
            # produce rate times this window: ~120 KB per rollout, so ~0.7 GB at 50 rollouts/s)
            trimmer = ServiceProcess(
                "topics-trim", agl_command("topics", "trim", "--every", "30", "--min-age", "120"), env=self.env(),
                log_path=self.log_dir / "topics-trim.log",
            ).start()  # fmt: skip
            self.services.append(trimmer)
        if self.start_processors:
            self.settings.data_dir.mkdir(parents=True, exist_ok=True)
            health = self.log_dir / "processors.health.json"
            health.unlink(missing_ok=True)
            processors = ServiceProcess(
                "processors",
                agl_command("processors", "--health-file", str(health), "--health-interval", "2", *self.processor_args),
                env=self.env(), log_path=self.log_dir / "processors.log",
            ).start()  # fmt: skip
            self.services.append(processors)
            await self._wait_for(health, processors, timeout=120)
        return self.settings

    def start_runners(self, agent: Union[str, Sequence[str]], n_runners: int, *, concurrency: int = 1,
                      extra_args: Sequence[str] = (), env: Optional[dict[str, str]] = None) -> ServiceProcess:  # fmt: skip
        """``agent``: a ``module:object`` path, or the runner's agent arguments (``["--components", FILE]``).

        The runners start with ``settings.runner_python`` (``AGL_RUNNER_PYTHON``) when set: an agent whose
        framework lives in another venv runs there, with agl-stream's base install, while the stack stays here."""
        agent_args = ["--agent", agent] if isinstance(agent, str) else list(agent)
        runners = ServiceProcess(
            "runners",
            agl_command("runner", *agent_args, "--n-runners", str(n_runners), "--concurrency", str(concurrency),
                        "--no-progress", *extra_args, python=self.settings.runner_python),
            env={**self.env(), **(env or {})}, log_path=self.log_dir / "runners.log",
        ).start()  # fmt: skip
        self.services.append(runners)
        return runners

    async def start_dashboard(self, *, port: int = DASHBOARD_PORT, timeout: float = 60.0) -> Optional[str]:
        """``agl-stream dashboard`` as a child service; returns its URL (token included).

        The dashboard is a convenience: when it cannot start (the processors extra is missing, no
        port) the job goes on without it, with a warning, and it is not supervised as a part the job
        needs. It binds 127.0.0.1 and gets a fresh token through its environment (not its argv).
        """
        token = secrets.token_urlsafe(18)
        preferred = port if port and _port_free(port) else 0
        # the preferred port can be taken between the check and the dashboard's bind (another job starting
        # beside this one): then once more on a free port
        for chosen in dict.fromkeys((preferred, 0)):
            url, port_taken = await self._start_dashboard_on(chosen, token, timeout)
            if not port_taken:
                return url
        return None

    async def _start_dashboard_on(self, port: int, token: str, timeout: float) -> tuple[Optional[str], bool]:
        """The dashboard's URL, or None and whether it failed only because ``port`` was taken."""
        (self.log_dir / "dashboard.log").unlink(missing_ok=True)  # its URL line must be this start's
        dashboard = ServiceProcess(
            "dashboard", agl_command("dashboard", "--port", str(port), "--host", "127.0.0.1"),
            env={**self.env(), env_name("dashboard_token"): token}, log_path=self.log_dir / "dashboard.log",
        ).start()  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            url = _printed_url(dashboard.log_path)
            if url is not None:
                self.dashboard = dashboard
                logger.info("dashboard at %s", url)
                return url, False
            if not dashboard.alive:
                tail = dashboard.tail(5).strip()
                port_taken = port != 0 and "cannot listen" in tail
                logger.warning("the dashboard did not start on port %s (exit code %s): %s%s", port, dashboard.returncode,
                               tail, "; trying a free port" if port_taken else "")  # fmt: skip
                return None, port_taken
            await asyncio.sleep(0.1)
        logger.warning("the dashboard did not start within %.0fs; going on without it", timeout)
        dashboard.stop()
        return None, False

    def service(self, name: str) -> Optional[ServiceProcess]:
        """The running service called ``name`` (``processors``, ``topics-trim``, ``runners``), if any."""
        return next((s for s in self.services if s.name == name), None)

    def check(self) -> None:
        """Raise :class:`ServiceCrashed` when a service died; the caller stops the rest."""
        if self.broker is not None and not self.broker.running:
            from agl_stream.service import ServiceCrashed

            raise ServiceCrashed("broker", None, "(see broker.log)")
        for service in self.services:
            service.check()

    def stop(self) -> None:
        if self.dashboard is not None:
            self.dashboard.stop(timeout=10)
            self.dashboard = None
        for service in reversed(self.services):
            code = service.stop()
            logger.info("stopped %s (exit code %s)", service.name, code)
        self.services.clear()
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    async def _create_topics(self) -> None:
        """``agl-stream topics create`` (the topics service's own command: no import across services)."""
        proc = await asyncio.create_subprocess_exec(
            *agl_command("topics", "create"), env={**os.environ, **self.env()},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, preexec_fn=die_with_parent(os.getpid()),
        )  # fmt: skip
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"topic creation failed (exit {proc.returncode}):\n{out.decode(errors='replace')}")

    async def _wait_for(self, health: Path, service: ServiceProcess, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not health.exists():
            service.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{service.name} did not report health within {timeout}s:\n{service.tail()}")
            await asyncio.sleep(0.2)
