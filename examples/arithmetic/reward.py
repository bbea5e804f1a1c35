"""The arithmetic task's score: task success, with the format reported beside it.

* ``correct`` (the reward, 0 or 1): the last integer in the reply equals the answer ("28",
  "16 + 12 = 28" and "So it is 28" are right; "27" is not). Format gates nothing beyond "there is a
  number": a bare wrong number earns nothing.
* ``format`` (reported, never paid): 0.5 for a bare integer (an optional trailing period is
  tolerated), 0.25 for a reply that starts with a number, 0 otherwise.

:func:`arithmetic_reward` is the older shaped reward (format + correctness, up to 0.5 each). It paid
a bare wrong number 0.5, and a learner trained on it learned the format, not the sums; it is kept
for comparison and reported as its parts.
"""

from __future__ import annotations

import re

_BARE = re.compile(r"^\s*-?\d+\s*\.?\s*$")
_STARTS_WITH_NUMBER = re.compile(r"^\s*-?\d")
_INT = re.compile(r"-?\d+")


def is_correct(reply: str, answer: str) -> bool:
    numbers = _INT.findall(reply or "")
    return bool(numbers) and numbers[-1].lstrip("+") == answer.strip()


def format_score(reply: str) -> float:
    reply = reply or ""
    if _BARE.match(reply):
        return 0.5
    return 0.25 if _STARTS_WITH_NUMBER.match(reply) else 0.0


def arithmetic_score(reply: str, answer: str) -> dict[str, float]:
    """The reward dimensions an episode reports: ``correct`` (primary, the reward) and ``format``."""
    return {"correct": float(is_correct(reply, answer)), "format": format_score(reply)}


def arithmetic_reward(reply: str, answer: str) -> float:
    """The shaped reward (format + correctness); see the module docstring for why training does not use it."""
    return format_score(reply) + 0.5 * is_correct(reply, answer)
