"""``agent_func``s the runner processes import by reference (a test module is not importable by name)."""

from __future__ import annotations

import json
import os

from openai import OpenAI

from agl_stream.training_service import Resource, Task

SERVED_LOG = "AGL_TEST_SERVED_LOG"


def graded_agent(resource: Resource, task: Task) -> float:
    """Training answers are sampled; evaluation answers are greedy and logged (the download check compares them).

    The reward (the answer's length, odd or even) varies with the sample, so a group carries signal."""
    val = resource.metadata.get("mode") == "val"
    messages = [{"role": "user", "content": task.question}]
    reply = OpenAI(base_url=resource.model_api, api_key="unused").chat.completions.create(
        model=resource.model_name, messages=messages, max_tokens=8, temperature=0.0 if val else 1.0)  # fmt: skip
    doc = reply.model_dump()
    log = os.environ.get(SERVED_LOG)
    if val and log:
        with open(log, "a") as fh:
            fh.write(json.dumps({"messages": messages, "policy_version": doc.get("policy_version"),
                                 "prompt_token_ids": doc.get("prompt_token_ids"),
                                 "token_ids": doc["choices"][0].get("token_ids")}) + "\n")  # fmt: skip
    return float(len(reply.choices[0].message.content or "") % 2)
