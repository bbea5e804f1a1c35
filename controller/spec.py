"""What the controller runs for each attempt: the user's command, how it gets its input, and its limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import BaseModel, Field, field_validator


class Limits(BaseModel):
    """Bounds on one attempt's process. None: unbounded (the rollout's own timeout still applies upstream)."""

    timeout_seconds: Optional[float] = Field(None, gt=0, description="wall-clock time; then SIGTERM to the group")
    kill_grace_seconds: float = Field(5.0, ge=0, description="after SIGTERM, how long before SIGKILL")
    cpu_seconds: Optional[int] = Field(None, gt=0, description="RLIMIT_CPU: SIGXCPU at the limit, SIGKILL 5 s of CPU later")
    memory_bytes: Optional[int] = Field(None, gt=0, description="RLIMIT_AS: allocations past it fail")
    open_files: Optional[int] = Field(None, gt=0, description="RLIMIT_NOFILE")


class InputDelivery(BaseModel):
    """How the task reaches the command: never through a shell (argv is exec'd as given)."""

    env_map: dict[str, str] = Field(
        default_factory=dict,
        description="variable -> dotted path in the task, e.g. QUESTION: input.question (strings as they are, "
        "anything else as JSON)",
    )
    json_file_env: Optional[str] = Field(
        "AGL_TASK_FILE", description="variable naming a file that holds the task as JSON (None: no file)"
    )
    stdin: bool = Field(False, description="also write the task as JSON to the command's stdin")

    @field_validator("env_map")
    @classmethod
    def _names_are_variables(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not name or not name.replace("_", "a").isalnum() or name[0].isdigit()]
        if bad:
            raise ValueError(f"env_map keys must be environment variable names: {bad}")
        return value


class CommandSpec(BaseModel):
    """The user's agent as a command: any executable, run once per attempt."""

    argv: list[str] = Field(min_length=1, description="the program and its arguments, exec'd without a shell")
    cwd: Optional[Path] = None
    env: dict[str, str] = Field(default_factory=dict, description="fixed variables for every attempt")
    input: InputDelivery = Field(default_factory=InputDelivery)
    limits: Limits = Field(default_factory=Limits)
    log_cap_bytes: int = Field(1 << 20, ge=1024, description="output kept per attempt: its first and last halves")


class TaskFieldMissing(KeyError):
    """An ``env_map`` path that the task does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


def task_document(input: Any, *, rollout_id: str, attempt_id: str, mode: Optional[str]) -> dict[str, Any]:
    """What ``env_map`` paths and the task file see: the input under ``input`` beside the ids."""
    return {"input": input, "rollout_id": rollout_id, "attempt_id": attempt_id, "mode": mode}


def mapped_env(env_map: Mapping[str, str], document: Mapping[str, Any]) -> dict[str, str]:
    """The ``env_map`` variables' values, read from ``document`` by dotted path (list items by index)."""
    values: dict[str, str] = {}
    for name, path in env_map.items():
        node: Any = document
        for part in path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise TaskFieldMissing(f"env_map {name}: the task has no {path!r} (no {part!r})")
        values[name] = node if isinstance(node, str) else json.dumps(node)
    return values
