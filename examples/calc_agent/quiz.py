"""A longer multi-turn task: several calculator questions asked one after the other in one conversation.

The calculator agent (``agent.py``) answers one question: a ``CALC`` call and the answer, about two LLM calls. Here
one rollout is a quiz of ``len(questions)`` such questions (three in tier ``quiz3``) put to the model in a single
conversation: each question is a user turn after the previous answer, and each is answered with the same protocol
(``protocol.py``: ``CALC <expression>``, ``RESULT <value>``, then the number). So a rollout takes three to six LLM
calls, and every call's prompt is the whole conversation so far: the calls share a growing prefix, which is what
trajectory aggregation is for (issue 35). The model knows how to do each step some of the time (the calculator
agent's pass@1 on ``mul3x2`` is about 0.57): a task it can learn, unlike the one-operation chain (``chain.py``).

The reward is the fraction of the quiz's questions answered right (``correct``); ``all_correct``, the calls made and
the per-question results (``right``, for the measurement's per-question pass@k) are reported beside it.

Measure before training (``examples/measure_tasks.py --only quiz/quiz3``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from agl_stream.emitter import emit_reward
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from examples.arithmetic.agent import calculator
from examples.arithmetic.reward import is_correct
from examples.arithmetic.tiers import make_tier
from examples.calc_agent.chain import Ask, openai_ask
from examples.calc_agent.protocol import FEW_SHOT, SYSTEM_PROMPT, parse_call


@dataclass
class QuizEpisode:
    finals: list[str] = field(default_factory=list)  #: the model's final reply to each question
    llm_calls: int = 0
    tool_calls: int = 0


def run_quiz(questions: list[str], ask: Ask) -> QuizEpisode:
    """The conversation: per question, a reply; if it is a well-formed call, its result and one more reply."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, *FEW_SHOT]
    episode = QuizEpisode()
    for question in questions:
        messages.append({"role": "user", "content": question})
        reply = ask(messages)
        episode.llm_calls += 1
        expression = parse_call(reply)
        if expression is not None:
            episode.tool_calls += 1
            messages += [{"role": "assistant", "content": reply.strip()},
                         {"role": "user", "content": f"RESULT {calculator(expression)}"}]  # fmt: skip
            reply = ask(messages)
            episode.llm_calls += 1
        messages.append({"role": "assistant", "content": reply.strip()})
        episode.finals.append(reply)
    return episode


def score(episode: QuizEpisode, answers: list[str]) -> dict[str, Any]:
    """``correct`` (the fraction right) is the reward; the rest are diagnostics."""
    right = [float(is_correct(final, answer)) for final, answer in zip(episode.finals, answers)]
    return {"correct": sum(right) / len(right), "all_correct": float(all(right)), "right": right,
            "tool_calls": float(episode.tool_calls), "llm_calls": float(episode.llm_calls)}  # fmt: skip


def run_episode(task: dict[str, Any], llm: LLM) -> dict[str, Any]:
    return score(run_quiz(list(task["questions"]), openai_ask(llm)), [str(a) for a in task["answers"]])


@rollout
def calc_quiz_agent(task: dict[str, Any], llm: LLM) -> None:
    """One rollout: the final reward is the fraction right, the rest beside it (numbers only)."""
    rewards = {key: value for key, value in run_episode(task, llm).items() if key != "right"}
    emit_reward(rewards, primary_key="correct")


#: tier -> (questions per quiz, the calculator tier each question is drawn from)
QUIZ_TIERS: dict[str, tuple[int, str]] = {"quiz3": (3, "mul3x2"), "quiz4": (4, "mul3x2")}


def make_quiz(tier: str, n: int, seed: int, *, exclude: Callable[[str], bool] = lambda q: False) -> list[dict[str, Any]]:
    """``n`` quizzes of a quiz tier, no question repeated (nor one ``exclude`` names), with their exact answers."""
    if tier not in QUIZ_TIERS:
        raise ValueError(f"unknown quiz tier {tier!r}; known: {', '.join(QUIZ_TIERS)}")
    size, base = QUIZ_TIERS[tier]
    pool = [row for row in make_tier(base, n * size * 2, seed=seed) if not exclude(row["question"])]
    random.Random(f"{tier}:{seed}").shuffle(pool)
    if len(pool) < n * size:
        raise ValueError(f"only {len(pool)} distinct questions for {n} quizzes of {size}")
    rows = []
    for i in range(n):
        part = pool[i * size:(i + 1) * size]
        rows.append({"id": f"{tier}-{seed}-{i}", "tier": tier, "question": part[0]["question"],
                     "questions": [r["question"] for r in part], "answers": [str(r["answer"]) for r in part]})  # fmt: skip
    return rows
