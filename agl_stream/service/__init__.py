"""The service kit: how every agl-stream process is started, stopped and bounded.

- :class:`ServiceProcess`: a service as a child process that cannot outlive its starter (its stop is
  graceful, then SIGKILL for the whole tree; a starter's death reaches it through the kernel).
- :func:`run_until_signal` / :class:`StopSignals` / :class:`StopDeadline`: a service's side of the same
  rule: SIGINT/SIGTERM start a graceful stop, and the deadline ends the process anyway.
- :class:`ExitCode`: the statuses a service ends with.
- :class:`HttpHost` / :func:`serve_workers`: the one way a service serves HTTP (on its loop, on a thread,
  or as its main job), on a socket from :func:`bound_socket`.
- :func:`run_on_service_loop` / :func:`loop_factory`: the loop services run on (uvloop where installed).
- :func:`add_health_routes` / :func:`health_app`: one health answer behind every probe path.
- :func:`presented_token` / :func:`token_verdict`: the one token check (each service words its refusal).
- :func:`retrying` / :func:`retrying_blocking`: the one retry loop with backoff (tenacity underneath).
- :func:`mint_attempt_key` / :func:`verify_attempt_key`: per-attempt keys (the controller mints, the proxy checks).

Bounds, per service: ``docs/operations.md``, "Stopping".
"""

from agl_stream.service._attempt_keys import AttemptKey, is_attempt_key, mint_attempt_key, verify_attempt_key
from agl_stream.service._exit import ExitCode
from agl_stream.service._health import HealthCheck, add_health_routes, always_healthy, health_app
from agl_stream.service._http import HttpHost, bound_socket, serve_workers
from agl_stream.service._token import TokenVerdict, presented_token, token_verdict
from agl_stream.service._retry import Backoff, RetryStopped, retrying, retrying_blocking
from agl_stream.service._kernel import arm_parent_death, become_subreaper, die_with_parent
from agl_stream.service._loop import loop_factory, run_on_service_loop
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
    "AttemptKey",
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "KILL_MARGIN_S",
    "Backoff",
    "STOP_GRACE_S",
    "STOP_WITH_PARENT_ENV",
    "ExitCode",
    "HealthCheck",
    "HttpHost",
    "RetryStopped",
    "ServiceCrashed",
    "ServiceProcess",
    "StopDeadline",
    "StopSignals",
    "TokenVerdict",
    "add_health_routes",
    "agl_command",
    "always_healthy",
    "arm_parent_death",
    "become_subreaper",
    "bound_socket",
    "descendants",
    "die_with_parent",
    "health_app",
    "is_attempt_key",
    "kill_all",
    "loop_factory",
    "mint_attempt_key",
    "presented_token",
    "retrying",
    "retrying_blocking",
    "run_on_service_loop",
    "run_until_signal",
    "serve_workers",
    "stop_bound",
    "stop_with_parent",
    "token_verdict",
    "verify_attempt_key",
]
