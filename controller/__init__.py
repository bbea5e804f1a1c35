"""The rollout controller: runs the user's agent, any executable, once per attempt (``agl-stream controller``).

- :mod:`.spec`: the command, how the task reaches it (env map, JSON file, stdin; never a shell), its limits;
- :mod:`.launch`: one attempt's process: its own group, rlimits, timeout, capped output, nothing left behind;
- :mod:`.outcome`: exit status -> the attempt's outcome.
"""

from agl_stream_controller.launch import ProcessResult, run_command
from agl_stream_controller.outcome import failure_reason
from agl_stream_controller.spec import CommandSpec, InputDelivery, Limits, TaskFieldMissing, mapped_env, task_document

__all__ = [
    "CommandSpec",
    "InputDelivery",
    "Limits",
    "ProcessResult",
    "TaskFieldMissing",
    "failure_reason",
    "mapped_env",
    "run_command",
    "task_document",
]
