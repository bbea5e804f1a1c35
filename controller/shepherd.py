"""The process between the controller and an attempt's command: it takes the command's tree down with the controller.

The kernel's parent-death signal reaches only a direct child. Were the command the controller's child, a
controller that died by SIGKILL would take the command with it, but not what the command started. So the
controller starts this shepherd (``python -I shepherd.py SETUP_JSON -- ARGV...``; the JSON holds the limits and
the controller's pid) instead:
- it asks for ``SIGUSR2`` when the controller dies, and then SIGKILLs every descendant it has, round after
  round until none is left (a process may fork between a round's listing and its kill), and exits;
- it is a child subreaper, so what the command started and orphaned (a daemon, a ``setsid`` child) is
  re-parented to it and still among its descendants;
- it applies the rlimits to the command only (its own interpreter needs more address space than an agent
  may be given), then waits and exits as the command did (the same code, or the same signal).
A SIGTERM to the group (the controller's timeout) is the command's to handle; the shepherd waits for it.

It starts once per attempt, so it imports the standard library and psutil only (``agl_stream.service``, whose
kernel helpers it repeats in three lines, costs 0.3 s to import), and it runs as a file in isolated mode
(``-I``): the command's environment (its own ``PYTHONPATH``, say) must not change how the shepherd starts.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any, Optional

import psutil

LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36

#: what the controller's death is announced with (SIGTERM is the timeout's, for the command)
CONTROLLER_GONE = signal.SIGUSR2
#: how long the take-down keeps killing what the tree forks meanwhile
TAKE_DOWN_S = 10.0
#: the shepherd's exit status when it could not start the command (exec failed: not found, not executable)
EXIT_NOT_STARTED = 127


def apply_limits(limits: dict[str, Any]) -> None:
    """Set the command's rlimits (in the command's process, between fork and exec)."""
    cpu, memory, files = limits.get("cpu_seconds"), limits.get("memory_bytes"), limits.get("open_files")
    if cpu is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + int(limits.get("cpu_hard_margin") or 5)))
    if memory is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if files is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))


def _prctl(option: int, value: int) -> bool:
    return LINUX and ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0


def _take_down_everything(signum: int, frame: Optional[FrameType]) -> None:
    """Kill every descendant, round after round, until none is left; then exit.

    One round is not enough: between listing the tree and killing it, a process of the tree may fork. Its
    child, orphaned by the kill, is re-parented here (the shepherd is a subreaper), so the next round finds it.
    """
    deadline = time.monotonic() + TAKE_DOWN_S
    while time.monotonic() < deadline:
        tree = [proc for proc in _descendants() if _alive(proc)]
        if not tree:
            break
        for proc in tree:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(tree, timeout=0.5)
        _reap_orphans()
    os._exit(128 + signum)


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap_orphans() -> None:
    """Collect the exit statuses of children that already ended (re-parented orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -I shepherd.py SETUP_JSON -- COMMAND [ARGS]...", file=sys.stderr)
        return 2
    limits, command = json.loads(argv[0]), argv[2:]
    signal.signal(CONTROLLER_GONE, _take_down_everything)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is for the command (it gets its own copy)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if LINUX and (not _prctl(PR_SET_PDEATHSIG, CONTROLLER_GONE) or os.getppid() != limits.get("parent_pid")):
        return EXIT_NOT_STARTED  # the controller died before the request took effect (or it cannot be made)
    try:
        child = subprocess.Popen(command, preexec_fn=lambda: _child_setup(limits), close_fds=False)
    except OSError as exc:
        print(f"agl-stream controller: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return EXIT_NOT_STARTED
    code = _wait_reaping(child)
    if code < 0:  # end as the command did: killed by the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _child_setup(limits: dict[str, Any]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the ignore above must not reach the command
    apply_limits(limits)


def _wait_reaping(child: "subprocess.Popen[bytes]") -> int:
    """Wait for the command; reap the orphans re-parented here meanwhile (a subreaper must, or they stay zombies)."""
    while True:
        pid, status = os.wait()
        if pid == child.pid:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
