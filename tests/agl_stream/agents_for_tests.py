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


def _llm_call(tracer: Any, prompt: list[int], response: list[int], response_id: str) -> None:
    """A span shaped exactly like an instrumented OpenAI call against vLLM (known token ids)."""
    from agl_stream import semconv

    with tracer.start_as_current_span(semconv.LLM_CALL_SPAN_NAME) as span:
        span.set_attributes({
            semconv.PROMPT_TOKEN_IDS: prompt,
            semconv.RESPONSE_TOKEN_IDS: response,
            semconv.RESPONSE_LOGPROBS: [-0.5] * len(response),
            semconv.GEN_AI_RESPONSE_ID: response_id,
        })  # fmt: skip
        time.sleep(0.002)


@rollout
def golden_agent(task: dict[str, Any]) -> None:
    """Nested agents, three LLM calls with known token ids, a mid-rollout reward and a final one."""
    from opentelemetry import trace

    tracer = trace.get_tracer("golden-agent")
    # Agent spans as the OpenTelemetry GenAI conventions mark them (``gen_ai.agent.name``).
    with tracer.start_as_current_span("invoke_agent planner", attributes={"gen_ai.agent.name": "planner"}):
        _llm_call(tracer, [1, 2, 3], [4, 5], "r1")
        with tracer.start_as_current_span("invoke_agent writer", attributes={"gen_ai.agent.name": "writer"}):
            _llm_call(tracer, [6, 7], [8], "r2")
        emit_reward(0.5)
        _llm_call(tracer, [9], [10, 11], "r3")
    emit_reward(float(task["final"]))
