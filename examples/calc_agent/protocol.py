"""The calculator protocol a 135M model can learn: a plain-text call the agent parses.

SmolLM2-135M's chat template has no tool calling; the embedded engine's hermes-style tool calling
(``<tool_call>`` JSON, docs/frameworks.md) is more than it reliably writes, so the
call is a line of text: ``CALC <expression>``. The agent evaluates the expression with the safe
calculator of ``examples.arithmetic`` and sends ``RESULT <value>`` back as the next user turn;
the model then answers with the number. Every LLM call is one triplet.

Scoring is task success only (see :func:`score`): the episode is right when the final answer is the
true answer. A well-formed call and a correct call are reported beside it as diagnostics (reward
dimensions), never paid for on their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from examples.arithmetic.agent import calculator
from examples.arithmetic.reward import is_correct

CALL = re.compile(r"^\s*CALC\s+([-+*/().\d\s]+?)\s*$", re.MULTILINE)

SYSTEM_PROMPT = (
    "You are a math assistant with a calculator. To use it, reply with one line: CALC <expression>. "
    "You get RESULT <value> back. Then reply with only the final number."
)
# One worked episode as earlier turns: the protocol, shown once.
FEW_SHOT = [
    {"role": "user", "content": "What is 417 * 23?"},
    {"role": "assistant", "content": "CALC 417 * 23"},
    {"role": "user", "content": "RESULT 9591"},
    {"role": "assistant", "content": "9591"},
]


def parse_call(reply: str) -> Optional[str]:
    """The expression of a well-formed ``CALC`` line (the first one), or None."""
    match = CALL.search(reply or "")
    if match is None:
        return None
    expression = match.group(1).strip()
    return None if calculator(expression).startswith("error") else expression


@dataclass(frozen=True)
class EpisodeScore:
    correct: float  # the final answer is right: the task success and the reward
    call_well_formed: float  # the first reply is a parseable CALC line
    call_correct: float  # ... whose value is the true answer

    def as_rewards(self) -> dict[str, float]:
        return {"correct": self.correct, "call_well_formed": self.call_well_formed, "call_correct": self.call_correct}


def score(first_reply: str, final_reply: str, answer: str) -> EpisodeScore:
    expression = parse_call(first_reply)
    call_correct = expression is not None and calculator(expression) == answer.strip()
    correct = is_correct(final_reply, answer)  # the reply's last integer is the answer
    return EpisodeScore(float(correct), float(expression is not None), float(call_correct))
