"""Children that die with their parent: the kernel's parent-death signal (``PR_SET_PDEATHSIG``).

A SIGKILLed starter runs no clean-up code, so only the kernel can stop what it started. Each child
asks for a signal when its parent goes; the request is made between fork and exec.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Callable, Optional

PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal this process gets when its parent dies


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` (run in the child between fork and exec) that arms ``sig`` on the parent's death.

    None where prctl(2) does not exist (not Linux): there, only a graceful stop reaches the child.
    The signal is delivered when the *thread* that forked exits, so start children from a thread
    that lives as long as the starter (the main thread, or a supervisor's event-loop thread)."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            os._exit(126)  # cannot honour the contract: fail the start rather than risk an orphan
        if os.getppid() != parent_pid:  # the parent died before the request took effect
            os._exit(1)

    return arm
