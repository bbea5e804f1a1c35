"""Exit statuses every agl-stream service shares, so a supervisor (or a person) can tell why one ended."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the service failed on its own (a crashed app, an error it could not recover from)
    USAGE = 2  # bad command line or settings (typer/click's convention)
    #: the graceful stop did not finish within the shutdown timeout, so the process exited anyway
    #: (``timeout(1)``'s status for a command that ran out of time)
    STOP_TIMED_OUT = 124
    INTERRUPTED = 130  # a second Ctrl-C/SIGTERM while stopping: exit at once (128 + SIGINT, the shells' convention)
