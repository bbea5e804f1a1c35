"""Services as child processes: start, watch, stop gracefully, kill (for fault injection).

Every agl-stream service is a CLI command (``agl-stream processors``, ``agl-stream serve``,
``agl-stream runner``...). Running them as child processes keeps the arrows between services
topics, not imports, and lets the trainer facade, the benchmarks and the fault-injection tests
drive the same binaries a cluster deployment runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Mapping, Optional, Sequence


class ServiceCrashed(RuntimeError):
    """A child service exited while it was expected to run."""

    def __init__(self, name: str, returncode: Optional[int], tail: str) -> None:
        super().__init__(f"service '{name}' exited with code {returncode}; last log lines:\n{tail}")
        self.name = name
        self.returncode = returncode


def agl_command(*args: str, python: Optional[Path] = None) -> list[str]:
    """argv for an ``agl-stream`` sub-command, run with ``python`` (default: the current interpreter)."""
    return [str(python) if python is not None else sys.executable, "-m", "agl_stream.cli.main", *args]


class ServiceProcess:
    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[Path] = None,
        cwd: Optional[Path] = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.cwd = cwd
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self.expected_exit = False

    def start(self) -> "ServiceProcess":
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log_path, "ab")
        else:
            out = None
        try:
            self._proc = subprocess.Popen(
                self.argv, env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT if out else None,
                start_new_session=True,
            )  # fmt: skip
        finally:
            if out is not None:
                out.close()
        self.expected_exit = False
        return self

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.poll() if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check(self) -> None:
        """Raise :class:`ServiceCrashed` if the service exited without being asked to."""
        if self._proc is not None and not self.expected_exit and self._proc.poll() is not None:
            raise ServiceCrashed(self.name, self._proc.returncode, self.tail())

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if self._proc is None:
            return None
        return self._proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> Optional[int]:
        """SIGTERM (the services' graceful shutdown), then SIGKILL after ``timeout``."""
        self.expected_exit = True
        if self._proc is None or self._proc.poll() is not None:
            return self.returncode
        self._signal(signal.SIGTERM)
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            return self._proc.wait(10)

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        self.expected_exit = True
        if self._proc is not None and self._proc.poll() is None:
            self._signal(signal.SIGKILL)
            self._proc.wait(10)

    def tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log file)"
        with open(self.log_path, "rb") as fh:
            return b"".join(deque(fh, maxlen=lines)).decode(errors="replace")

    def wait_for_log(self, needle: str, timeout: float) -> bool:
        """Wait until ``needle`` appears in the log (services print a line when they are ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            if self.log_path is not None and self.log_path.exists() and needle in self.log_path.read_text(errors="replace"):
                return True
            time.sleep(0.1)
        return False

    def _signal(self, sig: int) -> None:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass
