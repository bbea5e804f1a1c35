"""The longer multi-turn task's protocol: one operation per call, several calls, the answer last."""

from __future__ import annotations

from examples.calc_agent.chain import make_chain, one_operation, run_chain, score
from tests.examples.scripted_llm import scripted


def test_two_calls_then_the_answer_make_three_llm_calls_each_extending_the_last() -> None:
    ask, seen = scripted("CALC 23 * 41", "CALC 943 - 100", "843")
    episode = run_chain("What is 23 * 41 - 100?", ask)
    assert episode.results == ["943", "843"] and episode.final == "843"
    assert score(episode, "843") == {"correct": 1.0, "tool_calls": 2.0, "well_formed_calls": 2.0}
    assert len(seen) == 3  # each call's conversation starts with the previous one's, plus reply and result
    assert seen[1][: len(seen[0])] == seen[0] and seen[2][: len(seen[1])] == seen[1]
    assert seen[2][-1] == {"role": "user", "content": "RESULT 843"}


def test_a_call_with_two_operations_gets_an_error_back_and_the_call_budget_ends_the_episode() -> None:
    assert one_operation("23 * 41 - 100").startswith("error")
    assert one_operation(" -3 * 7 ") == "-21"
    ask, _ = scripted("CALC 23 * 41 - 100", "CALC 1 + 1", "CALC 2 + 2", "so 843")
    episode = run_chain("What is 23 * 41 - 100?", ask, max_calls=2)
    assert episode.calls == 2 and episode.final == "CALC 2 + 2"  # at the budget, the next reply is the answer
    assert score(episode, "843") == {"correct": 0.0, "tool_calls": 2.0, "well_formed_calls": 1.0}


def test_chain_questions_are_deterministic_distinct_and_right() -> None:
    rows = make_chain("chain3", 20, seed=1)
    assert rows == make_chain("chain3", 20, seed=1) and len({r["question"] for r in rows}) == 20
    for row in rows + make_chain("chain2", 20, seed=1):
        expression = row["question"].removeprefix("What is ").rstrip("?")
        assert int(row["answer"]) == eval(expression) and int(row["answer"]) > 0  # noqa: S307 (our own literal)
