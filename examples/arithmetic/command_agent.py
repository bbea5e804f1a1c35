"""The arithmetic task as a plain program, for the rollout controller: it imports nothing from agl-stream.

It reads what the controller hands every attempt (docs/controller.md) and nothing else:
``QUESTION`` and ``ANSWER`` (``--env-map QUESTION=input.question --env-map ANSWER=input.answer``), the model at
``OPENAI_BASE_URL`` with ``OPENAI_API_KEY`` (scoped to the attempt: every call is recorded as its span), and
upstream v1.0's ``AGL_EVENT_URL`` for the reward (a Kubernetes Job shares no disk with the controller). Run
locally, ``AGL_REWARD_FILE`` would do as well.

    agl-stream controller --env-map QUESTION=input.question --env-map ANSWER=input.answer \\
        -- python -m examples.arithmetic.command_agent
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request

from openai import OpenAI

SYSTEM_PROMPT = "You are a calculator. Reply with only the final number, nothing else."


def score(reply: str, answer: str) -> float:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", reply)
    return 1.0 if numbers and float(numbers[-1]) == float(answer) else 0.0


def post_reward(value: float) -> None:
    """Upstream v1.0's event: ``{"event_type": "reward", "data": {"value": r}}`` with the attempt's key."""
    request = urllib.request.Request(
        os.environ["AGL_EVENT_URL"], data=json.dumps({"event_type": "reward", "data": {"value": value}}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"},
        method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def main() -> int:
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    reply = client.chat.completions.create(
        model=os.environ.get("AGENT_MODEL", "smollm2"), max_tokens=16, temperature=1.0,
        messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": os.environ["QUESTION"]}],
    ).choices[0].message.content or ""  # fmt: skip
    reward = score(reply, os.environ["ANSWER"])
    print(json.dumps({"question": os.environ["QUESTION"], "reply": reply, "reward": reward}))
    post_reward(reward)
    return 0


if __name__ == "__main__":
    sys.exit(main())
