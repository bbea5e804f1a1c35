"""The service kit: how every agl-stream process is started, stopped and bounded.

- :class:`ServiceProcess`: a service as a child process that cannot outlive its starter (its stop is
  graceful, then SIGKILL for the whole tree; a starter's death reaches it through the kernel).
- :func:`run_until_signal` / :class:`StopSignals` / :class:`StopDeadline`: a service's side of the same
  rule: SIGINT/SIGTERM start a graceful stop, and the deadline ends the process anyway.
- :class:`ExitCode`: the statuses a service ends with.

Bounds, per service: ``docs/operations.md``, "Stopping".
"""

from agl_stream.service._exit import ExitCode
from agl_stream.service._kernel import arm_parent_death, become_subreaper, die_with_parent
from agl_stream.service._stop import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    STOP_GRACE_S,
    StopDeadline,
    StopSignals,
    run_until_signal,
    STOP_WITH_PARENT_ENV,
    stop_with_parent,
)
from agl_stream.service._supervisor import (
    KILL_MARGIN_S,
    ServiceCrashed,
    ServiceProcess,
    agl_command,
    descendants,
    kill_all,
    stop_bound,
)

__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "KILL_MARGIN_S",
    "STOP_GRACE_S",
    "STOP_WITH_PARENT_ENV",
    "ExitCode",
    "ServiceCrashed",
    "ServiceProcess",
    "StopDeadline",
    "StopSignals",
    "agl_command",
    "arm_parent_death",
    "become_subreaper",
    "descendants",
    "die_with_parent",
    "kill_all",
    "run_until_signal",
    "stop_bound",
    "stop_with_parent",
]
