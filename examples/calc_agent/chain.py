"""A longer multi-turn task: a calculator that does one operation per call, on two- and three-operation questions.

The calculator agent's task (``agent.py``) takes one call and an answer: two LLM calls per rollout. Here the tool
evaluates a single operation (``CALC 12 * 31``), so ``What is 12 * 31 - 205?`` takes two calls and the answer
(three LLM calls), ``What is 23 * 41 + 17 * 52?`` three calls and the answer (four). Every call's prompt is the
conversation so far, so a rollout's calls share a long prefix: what trajectory aggregation is for (issue 35).

The protocol is shown once as earlier turns (a two-step episode). A reply without a ``CALC`` line is the final
answer; a call with more than one operation gets an error back as its ``RESULT`` (and counts as a call); at
``max_calls`` calls the next reply is the answer. The reward is the task success (the final reply's last integer
is the answer); the number of calls and whether each was well formed are reported beside it.

Measure before training (``examples/measure_tasks.py --only chain/chain2 chain/chain3``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from agl_stream.emitter import emit_reward
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from examples.arithmetic.reward import is_correct

SYSTEM_PROMPT = (
    "You are a math assistant with a calculator that does one operation per call. To use it, reply with one line: "
    "CALC <number> <operation> <number>. You get RESULT <value> back. Call it as often as you need, then reply "
    "with only the final number."
)
FEW_SHOT = [
    {"role": "user", "content": "What is 12 * 31 - 205?"},
    {"role": "assistant", "content": "CALC 12 * 31"},
    {"role": "user", "content": "RESULT 372"},
    {"role": "assistant", "content": "CALC 372 - 205"},
    {"role": "user", "content": "RESULT 167"},
    {"role": "assistant", "content": "167"},
]
CALL = re.compile(r"^\s*CALC\s+(.+?)\s*$", re.MULTILINE)
ONE_OPERATION = re.compile(r"^\s*(-?\d+)\s*([-+*])\s*(-?\d+)\s*$")


def one_operation(expression: str) -> str:
    """``a op b`` for integers and + - *, else an error the model reads as its result."""
    match = ONE_OPERATION.match(expression)
    if match is None:
        return "error: one operation per call, like 12 * 31"
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


def parse_call(reply: str) -> Optional[str]:
    """The expression of the reply's first ``CALC`` line, or None (then the reply is the answer)."""
    match = CALL.search(reply or "")
    return match.group(1) if match else None


@dataclass
class ChainEpisode:
    replies: list[str] = field(default_factory=list)  #: the model's replies, one per LLM call
    results: list[str] = field(default_factory=list)  #: what the tool returned to each call

    @property
    def final(self) -> str:
        return self.replies[-1] if self.replies else ""

    @property
    def calls(self) -> int:
        return len(self.results)

    @property
    def well_formed_calls(self) -> int:
        return sum(not r.startswith("error") for r in self.results)


Ask = Callable[[list[dict[str, Any]]], str]


def run_chain(question: str, ask: Ask, *, max_calls: int = 4) -> ChainEpisode:
    """The conversation: ``ask(messages)`` is one LLM call, returning the reply text."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, *FEW_SHOT,
                                      {"role": "user", "content": question}]  # fmt: skip
    episode = ChainEpisode()
    while True:
        reply = ask(messages)
        episode.replies.append(reply)
        expression = parse_call(reply)
        if expression is None or episode.calls >= max_calls:
            return episode
        result = one_operation(expression)
        episode.results.append(result)
        messages += [{"role": "assistant", "content": reply.strip()}, {"role": "user", "content": f"RESULT {result}"}]


def score(episode: ChainEpisode, answer: str) -> dict[str, float]:
    """``correct`` is the reward; the calls are diagnostics."""
    return {"correct": float(is_correct(episode.final, answer)), "tool_calls": float(episode.calls),
            "well_formed_calls": float(episode.well_formed_calls)}  # fmt: skip


def openai_ask(llm: LLM, max_tokens: int = 16) -> Ask:
    from openai import OpenAI

    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=300)
    params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 1.0, **llm.sampling_parameters}

    def ask(messages: list[dict[str, Any]]) -> str:
        answer = client.chat.completions.create(model=llm.model, messages=messages, **params)  # type: ignore[arg-type]
        return answer.choices[0].message.content or ""

    return ask


def run_episode(task: dict[str, Any], llm: LLM) -> dict[str, float]:
    return score(run_chain(str(task["question"]), openai_ask(llm)), str(task["answer"]))


@rollout
def calc_chain_agent(task: dict[str, Any], llm: LLM) -> None:
    """One rollout: the final reward is the task success, the calls beside it."""
    emit_reward(run_episode(task, llm), primary_key="correct")


def _chain2(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(11, 99), rng.randint(11, 99)
    c = rng.randint(10, a * b - 1)
    return f"What is {a} * {b} - {c}?", a * b - c


def _chain3(rng: random.Random) -> tuple[str, int]:
    a, b, c, d = rng.randint(11, 99), rng.randint(11, 99), rng.randint(11, 99), rng.randint(11, 99)
    return f"What is {a} * {b} + {c} * {d}?", a * b + c * d


CHAIN_TIERS: dict[str, Callable[[random.Random], tuple[str, int]]] = {"chain2": _chain2, "chain3": _chain3}


def make_chain(tier: str, n: int, seed: int) -> list[dict[str, str]]:
    """``n`` distinct questions of a chain tier, with their exact answers."""
    if tier not in CHAIN_TIERS:
        raise ValueError(f"unknown chain tier {tier!r}; known: {', '.join(CHAIN_TIERS)}")
    rng, seen, rows = random.Random(f"{tier}:{seed}"), set(), []
    while len(rows) < n:
        question, answer = CHAIN_TIERS[tier](rng)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": f"{tier}-{seed}-{len(rows)}", "tier": tier, "question": question, "answer": str(answer)})
    return rows
