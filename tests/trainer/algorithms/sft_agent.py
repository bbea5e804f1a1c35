"""An agent for the SFT tests (runner processes import it as module:object).

It asks the served policy for a short reply; the reward is the share of ASCII letters in the
reply, which varies from sample to sample even with the tiny random model, so selecting the best
samples is meaningful.
"""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from agl_stream.litagent import rollout
from agl_stream.types import LLM


def letter_share(text: str) -> float:
    return sum(c.isascii() and c.isalpha() for c in text) / len(text) if text else 0.0


@rollout
def letters_agent(task: dict[str, Any], llm: LLM) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=120)
    reply = client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": task["prompt"]}],
        **{"max_tokens": 8, **llm.sampling_parameters},
    )
    return letter_share(reply.choices[0].message.content or "")
