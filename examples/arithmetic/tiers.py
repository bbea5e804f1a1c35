"""Arithmetic questions by difficulty tier, generated deterministically from a seed.

The tiers span what SmolLM2-135M can and cannot do unaided (measured in
``docs/task-difficulty.md``): ``add1`` single-digit sums, ``addsub30`` the two-operand sums and
differences up to 30 of the original demo, ``mul2x1`` a two-digit times a one-digit number, and
``mul3x2`` a three-digit times a two-digit number (out of reach without a calculator).
"""

from __future__ import annotations

import random
from typing import Callable

Question = dict[str, str]


def _add1(rng: random.Random) -> tuple[int, str, int]:
    return rng.randint(1, 9), "+", rng.randint(1, 9)


def _addsub30(rng: random.Random) -> tuple[int, str, int]:
    a, b, op = rng.randint(1, 30), rng.randint(1, 30), rng.choice("+-")
    return (max(a, b), op, min(a, b)) if op == "-" else (a, op, b)


def _mul2x1(rng: random.Random) -> tuple[int, str, int]:
    return rng.randint(11, 99), "*", rng.randint(2, 9)


def _mul3x2(rng: random.Random) -> tuple[int, str, int]:
    return rng.randint(101, 999), "*", rng.randint(11, 99)


TIERS: dict[str, Callable[[random.Random], tuple[int, str, int]]] = {
    "add1": _add1, "addsub30": _addsub30, "mul2x1": _mul2x1, "mul3x2": _mul3x2,
}  # fmt: skip


def make_tier(tier: str, n: int, seed: int) -> list[Question]:
    """``n`` distinct questions of one tier (``What is a op b?`` with the exact integer answer)."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; known: {', '.join(TIERS)}")
    rng, seen, rows = random.Random(f"{tier}:{seed}"), set(), []
    while len(rows) < n:
        a, op, b = TIERS[tier](rng)
        if (a, op, b) in seen and len(seen) < 50 * n:
            continue
        seen.add((a, op, b))
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        rows.append({"id": f"{tier}-{seed}-{len(rows)}", "tier": tier, "question": f"What is {a} {op} {b}?", "answer": str(answer)})
    return rows
