"""The examples' reward functions and shipped data are consistent (pure logic, no LLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.arithmetic.agent import calculator
from examples.arithmetic.reward import arithmetic_reward, arithmetic_score
from examples.room_selector.rooms import BY_ID, best_room, feasible, room_reward
from examples.text_to_sql.evaluate import execution_match, extract_sql

ROOT = Path(__file__).resolve().parents[2] / "examples"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    ("reply", "reward"),
    [("42", 1.0), (" 42. ", 1.0), ("41", 0.5), ("12 + 30 = 42", 0.75), ("12 + 30 = 41", 0.25),
     ("So it is 42", 0.5), ("The answer is forty-two", 0.0), ("", 0.0)],
)
def test_arithmetic_reward(reply: str, reward: float) -> None:
    assert arithmetic_reward(reply, "42") == reward


@pytest.mark.parametrize(
    ("reply", "correct", "form"),
    [("42", 1.0, 0.5), ("41", 0.0, 0.5), ("12 + 30 = 42", 1.0, 0.25), ("So it is 42", 1.0, 0.0), ("", 0.0, 0.0)],
)
def test_arithmetic_score_pays_only_for_the_right_answer(reply: str, correct: float, form: float) -> None:
    assert arithmetic_score(reply, "42") == {"correct": correct, "format": form}


def test_arithmetic_data_answers_are_right() -> None:
    for row in _rows(ROOT / "arithmetic/data/val.jsonl"):
        expr = row["question"].removeprefix("What is ").rstrip("?")
        assert calculator(expr) == row["answer"]
    assert calculator("__import__('os')").startswith("error")


def test_room_answers_are_the_best_feasible_room() -> None:
    rows = _rows(ROOT / "room_selector/data/val.jsonl")
    assert len(rows) == 29
    for row in rows:
        assert best_room(row) == row["answer"] and feasible(BY_ID[row["answer"]], row)
        assert room_reward(f"Book {row['answer']}.", row) == 1.0
    assert room_reward("no idea", rows[0]) == 0.0


def test_gold_sql_executes_and_matches_itself() -> None:
    rows = _rows(ROOT / "text_to_sql/data/train.jsonl") + _rows(ROOT / "text_to_sql/data/val.jsonl")
    assert all(execution_match(r["gold_sql"], r["gold_sql"]) == 1.0 for r in rows)
    assert execution_match("SELECT name FROM departments WHERE 0", rows[1]["gold_sql"]) == 0.0
    assert execution_match("DROP TABLE employees", rows[0]["gold_sql"]) == 0.0  # read-only connection
    assert extract_sql("```sql\nSELECT 1;\n```") == "SELECT 1"
