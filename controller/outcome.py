"""An attempt's outcome from how its process ended: exit 0 succeeded, anything else failed, with the reason."""

from __future__ import annotations

import signal
from typing import Optional

from agl_stream_controller.launch import ProcessResult
from agl_stream_controller.spec import Limits


def failure_reason(result: ProcessResult, limits: Limits) -> Optional[str]:
    """None: the attempt succeeded (exit 0 in time). Otherwise why it failed, in words an operator can act on."""
    if result.timed_out:
        stopped = f"its Job was stopped ({result.ended_by})" if result.ended_by else "its process group was stopped"
        return f"timeout: still running after {limits.timeout_seconds:g} s; {stopped}"
    if result.returncode == 0:
        return None
    if result.ended_by is not None:
        return f"{result.ended_by} (exit code {result.returncode})"
    if result.signal is not None:
        name = _signal_name(result.signal)
        if result.signal == signal.SIGXCPU or (
            result.signal == signal.SIGKILL and limits.cpu_seconds is not None
            and result.cpu_seconds is not None and result.cpu_seconds >= limits.cpu_seconds
        ):  # fmt: skip
            return f"cpu limit: {name} after {limits.cpu_seconds} CPU seconds"
        return f"killed by {name}"
    return f"exit code {result.returncode}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
