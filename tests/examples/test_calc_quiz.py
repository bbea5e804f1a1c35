"""The quiz task's protocol: several questions in one conversation, each with the calculator protocol."""

from __future__ import annotations

from examples.calc_agent.quiz import make_quiz, run_quiz, score
from tests.examples.scripted_llm import scripted


def test_three_questions_in_one_conversation_each_call_extending_the_last() -> None:
    questions = ["What is 417 * 23?", "What is 102 * 11?", "What is 250 * 40?"]
    # the first two with the calculator, the third answered without it (wrongly)
    ask, seen = scripted("CALC 417 * 23", "9591", "CALC 102 * 11", "1122", "9999")
    episode = run_quiz(questions, ask)
    assert episode.finals == ["9591", "1122", "9999"] and episode.llm_calls == 5 and episode.tool_calls == 2
    rewards = score(episode, ["9591", "1122", "10000"])
    assert rewards["right"] == [1.0, 1.0, 0.0] and abs(rewards["correct"] - 2 / 3) < 1e-9
    assert rewards["all_correct"] == 0.0 and rewards["llm_calls"] == 5.0
    for earlier, later in zip(seen, seen[1:]):  # every prompt starts with the previous one (what merging needs)
        assert later[: len(earlier)] == earlier
    assert seen[2][-1] == {"role": "user", "content": questions[1]}  # the next question follows the last answer
    assert seen[2][-2] == {"role": "assistant", "content": "9591"}


def test_a_malformed_call_is_the_answer_to_its_question() -> None:
    ask, seen = scripted("CALC nine times ten", "CALC 2 * 3", "6")
    episode = run_quiz(["What is 9 * 10?", "What is 2 * 3?"], ask)
    assert episode.finals == ["CALC nine times ten", "6"] and episode.tool_calls == 1 and len(seen) == 3
    assert score(episode, ["90", "6"])["right"] == [0.0, 1.0]


def test_quizzes_are_deterministic_with_no_question_twice_and_exclusions_kept_out() -> None:
    rows = make_quiz("quiz3", 40, seed=3)
    assert rows == make_quiz("quiz3", 40, seed=3)
    questions = [q for r in rows for q in r["questions"]]
    assert len(questions) == 120 == len(set(questions))
    for row in rows:
        for question, answer in zip(row["questions"], row["answers"]):
            assert int(answer) == eval(question.removeprefix("What is ").rstrip("?"))  # noqa: S307 (our own literal)
    held_out = make_quiz("quiz3", 10, seed=4, exclude=set(questions).__contains__)
    assert not {q for r in held_out for q in r["questions"]} & set(questions)
