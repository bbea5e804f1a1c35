"""Services as child processes that cannot outlive their starter.

Every agl-stream service is a CLI command (``agl-stream processors``, ``agl-stream runner``, ...). Running
them as child processes keeps the arrows between services topics, not imports, and lets the trainer
facade, the benchmarks and the fault-injection tests drive the same binaries a deployment runs.

The rule this module owns (issue 32), whatever ends the starter:
- a stop by the starter is graceful (SIGTERM to the child's process group), then SIGKILL to the group
  and to every descendant still alive once ``stop_timeout`` has passed;
- a starter that dies without stopping its children (SIGKILL, OOM kill, a crash) still stops them: each
  child asks the kernel for ``parent_death_signal`` when its starter dies, and a service's own stop is
  bounded by its :class:`~agl_stream.service.StopDeadline`;
- a child's children get the same from it, so the rule holds down the tree.
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

import psutil

from agl_stream.service._kernel import die_with_parent
from agl_stream.service._stop import DEFAULT_SHUTDOWN_TIMEOUT_S, STOP_GRACE_S, STOP_WITH_PARENT_ENV

#: how long the starter waits, past a child's own stop bound, before it SIGKILLs what is left
KILL_MARGIN_S = 2.0


class ServiceCrashed(RuntimeError):
    """A child service exited while it was expected to run."""

    def __init__(self, name: str, returncode: Optional[int], tail: str) -> None:
        super().__init__(f"service '{name}' exited with code {returncode}; last log lines:\n{tail}")
        self.name = name
        self.returncode = returncode


def agl_command(*args: str, python: Optional[Path] = None) -> list[str]:
    """argv for an ``agl-stream`` sub-command, run with ``python`` (default: the current interpreter)."""
    return [str(python) if python is not None else sys.executable, "-m", "agl_stream.cli.main", *args]


def stop_bound(shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> float:
    """How long a starter waits for a service whose graceful stop has ``shutdown_timeout``: its own
    deadline, plus a margin, before it SIGKILLs what is left."""
    return shutdown_timeout + STOP_GRACE_S + KILL_MARGIN_S


def descendants(pid: int) -> list[psutil.Process]:
    """Every live process below ``pid`` (children, grandchildren, ...); [] once it is gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def kill_all(procs: Sequence[psutil.Process], timeout: float = 10.0) -> list[psutil.Process]:
    """SIGKILL each of ``procs`` still alive and wait for them; returns the ones that would not die."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(list(procs), timeout=timeout)
    return alive


class ServiceProcess:
    """One service process, started in its own process group, stopped with everything it started."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[Path] = None,
        cwd: Optional[Path] = None,
        stop_timeout: float = stop_bound(),
        parent_death_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = {**os.environ, STOP_WITH_PARENT_ENV: "1", **(env or {})}
        self.log_path = log_path
        self.cwd = cwd
        self.stop_timeout = stop_timeout
        self.parent_death_signal = parent_death_signal
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self.expected_exit = False

    def start(self) -> "ServiceProcess":
        """Start the command (from a thread that outlives it: the parent-death signal follows the thread)."""
        out = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                self.argv, env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT if out else None,
                stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent(os.getpid(), self.parent_death_signal),
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

    def stop(self, timeout: Optional[float] = None) -> Optional[int]:
        """SIGTERM (the service's graceful stop) to its process group; after ``timeout`` (default
        ``stop_timeout``), SIGKILL to the group and to every descendant that left it. Returns the exit code."""
        self.expected_exit = True
        if self._proc is None:
            return None
        tree = descendants(self._proc.pid)
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._proc.wait(10)
        # the service is gone: whatever it started and did not take with it is an orphan now
        kill_all([p for p in tree if _running(p)])
        return self._proc.returncode

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would (what left the group stops on its parent's death)."""
        self.expected_exit = True
        if self._proc is not None and self._proc.poll() is None:
            self._signal(signal.SIGKILL)
            self._proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP the process group (a stalled machine, a long GC pause)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

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


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
