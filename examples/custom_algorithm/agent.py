"""The agent the custom algorithm tunes: fill the prompt template, stream the LLM's answer, grade it.

The reply is streamed (``stream=True``): the OpenInference instrumentation records the streamed
call, token ids included, exactly like a non-streamed one.
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

from agl_stream.litagent import rollout
from agl_stream.types import LLM, PromptTemplate


def grade(reply: str, expected: str) -> float:
    return 1.0 if expected.lower() in reply.lower() else 0.0


@rollout
async def qa_agent(task: dict[str, Any], prompt_template: PromptTemplate, llm: LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=60)
    stream = await client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": prompt_template.format(question=task["question"])}],
        max_tokens=32,
        stream=True,
    )
    reply = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    return grade(reply, task["answer"])  # the final reward
