"""Agents the runner tests execute (importable as module:object, also by runner subprocesses)."""

from __future__ import annotations

import os
import time

from opentelemetry import trace

import agl_stream.emitter as agl
from agl_stream.litagent import LitAgent, rollout

_otel = trace.get_tracer("plain.agent")


@rollout
def reward_agent(task: dict) -> None:
    """Uses only @rollout and emit_reward."""
    for step in range(task.get("steps", 2)):
        agl.emit_message(f"step {step}")
    agl.emit_reward(float(task["x"]) / 10)


@rollout
async def plain_otel_agent(task: dict) -> float:
    """No agl calls inside: plain OpenTelemetry spans, and a returned float reward."""
    with _otel.start_as_current_span("plan") as span:
        span.set_attribute("task.x", task["x"])
        with _otel.start_as_current_span("openai.chat.completion", attributes={"gen_ai.system": "openai"}):
            pass
    return task["x"] * 1.0


@rollout
def flaky_agent(task: dict) -> float:
    if task.get("fail"):
        raise ValueError(f"task {task['x']} is poisoned")
    return 1


@rollout
def slow_agent(task: dict) -> None:
    """Sleeps so a test can kill the runner mid-rollout (AGL_TEST_AGENT_SLEEP seconds)."""
    agl.emit_message("begin")
    time.sleep(float(os.environ.get("AGL_TEST_AGENT_SLEEP", "0.5")))
    agl.emit_reward(1.0)


class ModeAgent(LitAgent[dict]):
    def training_rollout(self, task, resources, rollout):  # type: ignore[no-untyped-def]
        agl.emit_object({"mode": "train", "resources": sorted(resources)})
        return 1.0

    def validation_rollout(self, task, resources, rollout):  # type: ignore[no-untyped-def]
        agl.emit_object({"mode": "val", "resources": sorted(resources)})
        return 0.0
