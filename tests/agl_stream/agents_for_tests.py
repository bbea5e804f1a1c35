"""Small agents used by integration tests (importable by runner processes as module:object)."""

from __future__ import annotations

import time
from typing import Any

from agl_stream.emitter import emit_reward, operation
from agl_stream.litagent import rollout


@rollout
def scoring_agent(task: dict[str, Any]) -> None:
    """Emits an operation span and the task's own score as the reward (no LLM needed)."""
    with operation(name="think") as op:
        op.set_input(x=task["x"])
        time.sleep(float(task.get("sleep", 0.0)))
        op.set_output(task["x"] * 2)
    emit_reward(float(task["score"]))


@rollout
def failing_agent(task: dict[str, Any]) -> float:
    if task.get("fail"):
        raise RuntimeError(f"task {task['x']} asked to fail")
    return float(task["score"])
