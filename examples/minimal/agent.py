"""The smallest trainable agent: one LLM call, one reward.

The task is a name; the agent asks the LLM to greet that person; the reward is 1.0 when the reply
mentions the name. ``emit_reward`` records the reward as a span (upstream's format), ``operation``
traces the grading step with its input and output.
"""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from agl_stream.emitter import emit_reward, operation
from agl_stream.litagent import rollout
from agl_stream.types import LLM


@operation
def grade(reply: str, name: str) -> float:
    return 1.0 if name.lower() in reply.lower() else 0.0


@rollout
def greeter(task: dict[str, Any], llm: LLM) -> None:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=120)
    reply = client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": f"Write a one-line greeting for {task['name']}."}],
        max_tokens=24,
        **llm.sampling_parameters,
    )
    emit_reward(grade(reply.choices[0].message.content or "", task["name"]))
