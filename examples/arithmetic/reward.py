"""The arithmetic reward: verifiable, half format and half correctness.

* format (0.5): the reply is a bare integer (an optional trailing period is tolerated);
* correctness (0.5): the last integer in the reply equals the answer.

A reply like "16 + 12 = 28" earns 0.5 (correct, wrong format), "28" earns 1.0, "27" earns 0.5.
"""

from __future__ import annotations

import re

_BARE = re.compile(r"^\s*-?\d+\s*\.?\s*$")
_INT = re.compile(r"-?\d+")


def arithmetic_reward(reply: str, answer: str) -> float:
    reply = reply or ""
    numbers = _INT.findall(reply)
    correct = bool(numbers) and numbers[-1].lstrip("+") == answer.strip()
    well_formed = bool(_BARE.match(reply))
    return 0.5 * well_formed + 0.5 * correct
