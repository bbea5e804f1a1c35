"""The calculator agent's protocol and scoring (pure logic), and the arithmetic tiers."""

from __future__ import annotations

import pytest

from examples.arithmetic.agent import calculator
from examples.arithmetic.tiers import TIERS, make_tier
from examples.calc_agent.protocol import parse_call, score


@pytest.mark.parametrize(
    ("reply", "expression"),
    [("CALC 347 * 29", "347 * 29"), ("  CALC (3+4)*2 ", "(3+4)*2"), ("CALC 347 * 29\nthen 10063", "347 * 29"),
     ("calc 347 * 29", None), ("CALC", None), ("CALC 3 +* ", None), ("CALC __import__('os')", None), ("10063", None)],
)
def test_parse_call(reply: str, expression: str | None) -> None:
    assert parse_call(reply) == expression


def test_score_reports_the_call_and_pays_only_the_final_answer() -> None:
    right = score("CALC 347 * 29", "10063", "10063")
    assert right.as_rewards() == {"correct": 1.0, "call_well_formed": 1.0, "call_correct": 1.0}
    miscopied = score("CALC 347 * 29", "10036", "10063")  # a right call, a wrong final answer
    assert miscopied.correct == 0.0 and miscopied.call_correct == 1.0
    wrong_call = score("CALC 347 + 29", "376", "10063")
    assert (wrong_call.call_well_formed, wrong_call.call_correct, wrong_call.correct) == (1.0, 0.0, 0.0)
    no_call = score("10063", "10063", "10063")  # answered unaided
    assert (no_call.call_well_formed, no_call.correct) == (0.0, 1.0)
    assert score("CALC 2 * 6", "The answer is 12.", "12").correct == 1.0 and score("", "none", "12").correct == 0.0


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_tiers_are_deterministic_distinct_and_right(tier: str) -> None:
    rows = make_tier(tier, 40, seed=3)
    assert rows == make_tier(tier, 40, seed=3) and rows != make_tier(tier, 40, seed=4)
    assert len({r["question"] for r in rows}) == 40
    for row in rows:
        assert calculator(row["question"].removeprefix("What is ").rstrip("?")) == row["answer"]
    with pytest.raises(ValueError, match="unknown tier"):
        make_tier("calculus", 1, 0)
