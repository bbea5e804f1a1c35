"""What the controller runs for each attempt: the user's command, how it gets its input, and its limits."""

from __future__ import annotations

import json
import re
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
    argv_template: bool = Field(
        False, description="fill {path.in.task} in the command's arguments, e.g. {input.question} ({{ and }}: braces); "
        "each argument stays one argument: no shell ever sees it",
    )

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
    check: Optional[list[str]] = Field(
        None, min_length=1,
        description="a command run after the agent exited 0, with its variables plus AGL_OUTPUT_FILE (the agent's "
        "output); it writes the reward to AGL_REWARD_FILE or prints it as its last line; exit != 0 fails the attempt",
    )
    check_timeout_seconds: float = Field(60.0, gt=0, description="wall-clock time the check may take")


class TaskFieldMissing(KeyError):
    """An ``env_map`` path that the task does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


def task_document(input: Any, *, rollout_id: str, attempt_id: str, mode: Optional[str]) -> dict[str, Any]:
    """What ``env_map`` paths and the task file see: the input under ``input`` beside the ids."""
    return {"input": input, "rollout_id": rollout_id, "attempt_id": attempt_id, "mode": mode}


def task_field(document: Mapping[str, Any], path: str, what: str) -> str:
    """The value at dotted ``path`` in ``document`` (list items by index): strings as they are, the rest as JSON."""
    node: Any = document
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise TaskFieldMissing(f"{what}: the task has no {path!r} (no {part!r})")
    return node if isinstance(node, str) else json.dumps(node)


def mapped_env(env_map: Mapping[str, str], document: Mapping[str, Any]) -> dict[str, str]:
    """The ``env_map`` variables' values, read from ``document`` by dotted path."""
    return {name: task_field(document, path, f"env_map {name}") for name, path in env_map.items()}


_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\}")


def rendered_argv(argv: list[str], document: Mapping[str, Any]) -> list[str]:
    """``argv`` with each ``{path}`` replaced by that task field (``{{``/``}}`` stand for braces); an argument
    stays one argument whatever the field holds, since no shell parses it."""

    def fill(match: "re.Match[str]") -> str:
        if match.group(1) is None:
            return match.group(0)[0]
        return task_field(document, match.group(1), f"argument {{{match.group(1)}}}")

    return [_PLACEHOLDER.sub(fill, arg) for arg in argv]
