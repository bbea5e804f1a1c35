"""What only the kernel can do for a starter that dies without running clean-up code (Linux prctl(2)).

- ``PR_SET_PDEATHSIG``: a child asks for a signal when its parent dies, even by SIGKILL. The request is
  made between fork and exec, and survives the exec.
- ``PR_SET_CHILD_SUBREAPER``: orphans further down the tree are re-parented to this process instead of
  init, so it can still find (and stop) grandchildren whose own parent died first.

Elsewhere (not Linux) both are unavailable: only a graceful stop reaches the children there.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Callable, Optional

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

#: exit status of a child that could not arm its parent-death signal, or whose parent was gone before it could
EXIT_NOT_ARMED = 126

LINUX = sys.platform.startswith("linux")


def _prctl(option: int, value: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` (run in the child between fork and exec) that arms ``sig`` on the parent's death.

    The signal comes when the *thread* that forked exits, so start children from a thread that lives as
    long as the starter (the main thread, or an event loop's thread), never from a pool worker."""
    if not LINUX:
        return None

    def arm() -> None:
        if not _prctl(PR_SET_PDEATHSIG, int(sig)):
            os._exit(EXIT_NOT_ARMED)  # cannot honour the contract: fail the start rather than risk an orphan
        if os.getppid() != parent_pid:  # the parent died before the request took effect
            os._exit(EXIT_NOT_ARMED)

    return arm


def arm_parent_death(sig: int = signal.SIGTERM) -> bool:
    """Ask for ``sig`` when this process's parent dies (from inside a running process); False where unsupported."""
    return LINUX and _prctl(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (see the module doc); False where unsupported."""
    return LINUX and _prctl(PR_SET_CHILD_SUBREAPER, 1)
