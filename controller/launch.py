"""Run one attempt's command: its own process group, its limits, its output capped, nothing left behind.

The command is exec'd from ``argv`` (no shell) in a new session (so its process group is its own), under
the shepherd (:mod:`.shepherd`): a controller that dies, even by SIGKILL, takes the command's whole tree
with it, and the rlimits apply to the command alone. While it runs its descendants are noted every ``TREE_POLL_S``: a grandchild
that left the group (``setsid``, a daemon) is still found and killed at the end. The end is the leader's
exit, the timeout, or the caller's cancellation (the controller stopping); in each case the whole group
and every noted descendant are killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import psutil

from agl_stream.service import kill_all
from agl_stream_controller.spec import Limits

#: the shepherd, run as a file (see its module doc)
SHEPHERD = Path(__file__).with_name("shepherd.py")
#: how often the process tree is noted while the command runs
TREE_POLL_S = 0.2
#: CPU seconds between SIGXCPU (the soft limit) and SIGKILL (the hard one)
CPU_HARD_MARGIN_S = 5


@dataclass(frozen=True)
class ProcessResult:
    """How an attempt's process ended."""

    returncode: int  #: its exit status; -N: killed by signal N
    timed_out: bool  #: the wall-clock limit ended it
    duration_seconds: float
    cpu_seconds: Optional[float]  #: user + system CPU of the command as last measured (None: never measured)
    log_path: Path
    log_bytes: int  #: everything it wrote
    log_dropped_bytes: int  #: what the cap left out (the middle)
    leftovers_killed: int  #: processes of its tree still alive after the leader ended, killed then
    ended_by: Optional[str] = None  #: what Kubernetes says ended a Job's pod (``OOMKilled``, ``DeadlineExceeded``)

    @property
    def signal(self) -> Optional[int]:
        return -self.returncode if self.returncode < 0 else None


class CappedLog:
    """Keeps the first and the last half of ``cap`` bytes of a stream in a file; counts the middle it drops."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.total = 0
        self._head = 0
        self._tail = bytearray()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "wb")

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self._head < self.head_cap:
            part = chunk[: self.head_cap - self._head]
            self._file.write(part)
            self._head += len(part)
            chunk = chunk[len(part) :]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self.tail_cap:
                del self._tail[: len(self._tail) - self.tail_cap]

    @property
    def dropped(self) -> int:
        return self.total - self._head - len(self._tail)

    def close(self) -> None:
        if self.dropped:
            self._file.write(f"\n[agl-stream controller: {self.dropped} bytes of output left out here]\n".encode())
        self._file.write(self._tail)
        self._file.close()


def shepherd_argv(argv: list[str], limits: Limits) -> list[str]:
    """The command under the shepherd (see :mod:`.shepherd`), which applies ``limits`` to it."""
    setup = {"parent_pid": os.getpid(), "cpu_seconds": limits.cpu_seconds, "cpu_hard_margin": CPU_HARD_MARGIN_S,
             "memory_bytes": limits.memory_bytes, "open_files": limits.open_files}  # fmt: skip
    return [sys.executable, "-I", str(SHEPHERD), json.dumps(setup), "--", *argv]


async def run_command(
    argv: list[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    limits: Limits = Limits(),
    stdin_data: Optional[bytes] = None,
    cwd: Optional[Path] = None,
    log_cap_bytes: int = 1 << 20,
) -> ProcessResult:
    """Run ``argv`` to its end (see the module doc). Cancelling this kills the command's tree first.

    Its output goes through a pipe of our own, not asyncio's: asyncio's ``wait()`` also waits for its pipes
    to close, and a grandchild that inherited them would keep them open past the leader's exit. Its stdin is
    a file for the same reason."""
    log = CappedLog(log_path, log_cap_bytes)
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    try:
        with tempfile.TemporaryFile() as stdin:
            if stdin_data is not None:
                stdin.write(stdin_data)
                stdin.seek(0)
            proc = await asyncio.create_subprocess_exec(
                *shepherd_argv(argv, limits), env=dict(env), cwd=cwd, start_new_session=True,
                stdin=stdin if stdin_data is not None else asyncio.subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
            )  # fmt: skip
    except BaseException:
        os.close(read_fd)
        log.close()
        raise
    finally:
        os.close(write_fd)
    tree = _Tree(proc.pid)
    pump = asyncio.create_task(asyncio.to_thread(_pump, read_fd, log))
    watch = asyncio.create_task(tree.watch())
    timed_out = False
    try:
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), limits.timeout_seconds)
        except asyncio.TimeoutError:
            timed_out = True
            await _stop_group(proc, limits.kill_grace_seconds)
    finally:
        if proc.returncode is None:  # cancelled: the controller is stopping
            _killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        leftovers = tree.alive()  # what it started and left running (in its group or out of it)
        _killpg(proc.pid, signal.SIGKILL)  # also members too young to have been noted
        survivors = await asyncio.to_thread(kill_all, leftovers)
        await asyncio.gather(pump, return_exceptions=True)  # every writer is gone: the pipe ends
        log.close()
    if survivors:
        raise RuntimeError(f"processes of the attempt would not die: {[p.pid for p in survivors]}")
    assert proc.returncode is not None
    return ProcessResult(
        returncode=proc.returncode, timed_out=timed_out, duration_seconds=time.monotonic() - started,
        cpu_seconds=tree.command_cpu_seconds, log_path=log_path, log_bytes=log.total, log_dropped_bytes=log.dropped,
        leftovers_killed=len(leftovers),
    )  # fmt: skip


def _pump(read_fd: int, log: CappedLog) -> None:
    """Copy the command's output into the log until every writer has closed the pipe (in a thread)."""
    with open(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            log.write(chunk)


async def _stop_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    _killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
    except asyncio.TimeoutError:
        _killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is empty


class _Tree:
    """The command's descendants as seen while it ran (psutil keeps each one's identity: no pid reuse)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, psutil.Process] = {}
        self.command_cpu_seconds: Optional[float] = None

    async def watch(self) -> None:
        while True:
            self.note()
            await asyncio.sleep(TREE_POLL_S)

    def note(self) -> None:
        try:
            shepherd = psutil.Process(self.pid)
            command_cpu = 0.0
            for child in shepherd.children():  # the command (and orphans the shepherd adopted)
                times = child.cpu_times()
                command_cpu += times.user + times.system
            for child in shepherd.children(recursive=True):
                self.seen.setdefault(child.pid, child)
            self.command_cpu_seconds = command_cpu
        except psutil.Error:
            pass

    def alive(self) -> list[psutil.Process]:
        alive = []
        for proc in self.seen.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        return alive
