"""The arithmetic reward: verifiable, half format and half correctness.

* format (up to 0.5): 0.5 when the reply is a bare integer (an optional trailing period is
  tolerated), 0.25 when it at least starts with a number ("16 + 12 = 28"), 0 otherwise;
* correctness (0.5): the last integer in the reply equals the answer.

"28" earns 1.0, "16 + 12 = 28" 0.75, "27" 0.5, "To solve this, ... 28" 0.5, prose without the
answer 0.0. The graded format term gives a small model a signal from its first samples.
"""

from __future__ import annotations

import re

_BARE = re.compile(r"^\s*-?\d+\s*\.?\s*$")
_STARTS_WITH_NUMBER = re.compile(r"^\s*-?\d")
_INT = re.compile(r"-?\d+")


def arithmetic_reward(reply: str, answer: str) -> float:
    reply = reply or ""
    numbers = _INT.findall(reply)
    correct = bool(numbers) and numbers[-1].lstrip("+") == answer.strip()
    if _BARE.match(reply):
        form = 0.5
    elif _STARTS_WITH_NUMBER.match(reply):
        form = 0.25
    else:
        form = 0.0
    return form + 0.5 * correct
