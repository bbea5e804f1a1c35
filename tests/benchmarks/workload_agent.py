"""The rollout workload of the benchmark issue, as an agent runner processes load by ``module:object``.

Modeled on upstream's store benchmark. Each task is ``{"name", "seed", "rounds", "final_reward",
"sleep"}``; everything else the agent does is a pure function of the task (:func:`plan`), so the
driver knows, independently of the system under test, how many spans and triplets every rollout
must produce and which values it must find in ClickHouse:

* ``rounds`` rounds (1-10), each an ``agentlightning.operation`` span (``workload.round``) with two
  nested child spans (plain OpenTelemetry, as instrumented libraries emit them), ``workload.llm`` (the triplet adapter is run with
  ``llm_call_match=workload.llm``, so every round is one triplet) and ``workload.tool``;
* every child carries random nested attributes (depth 1-3, breadth 2-6, key length 3-20, value
  length 5-300) flattened to dotted keys under ``workload.attr.``;
* one child of one round carries the task name (``workload.task_name``);
* about half the rounds end with an intermediate reward (a reward span, value in [0, 1));
* then a final ``workload.final`` span and the final reward in [1, 2].

A task with ``"tokens": K`` (K > 0) also puts K prompt and K response token ids, and the response's
logprobs, on every ``workload.llm`` span (the keys LLM tracers use), so its triplets are trainable: the
nemesis's learner trains on them. They come from their own random stream: the rest of the plan is the
same with or without them.

Every span (and every round) sleeps ``sleep`` seconds of agent "work" (default 0.01 s).
"""

from __future__ import annotations

import asyncio
import random
import string
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

import agl_stream.emitter as agl
import agl_stream.semconv as semconv
from agl_stream.litagent import rollout

_otel = trace.get_tracer("agl.workload")

ADAPTER_SPEC = "tracer:llm_call_match=workload.llm"
TASK_NAME_KEY = "workload.task_name"
ATTR_PREFIX = "workload.attr"
_ALPHABET = string.ascii_letters + string.digits


def _text(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choices(_ALPHABET, k=rng.randint(low, high)))


def random_attributes(rng: random.Random) -> dict[str, str]:
    """Random nested attributes (depth 1-3, breadth 2-6 per level), flattened to dotted keys."""
    depth = rng.randint(1, 3)
    out: dict[str, str] = {}

    def fill(prefix: str, level: int) -> None:
        for _ in range(rng.randint(2, 6)):
            key = f"{prefix}.{_text(rng, 3, 20)}"
            if level == depth:
                out[key] = _text(rng, 5, 300)
            else:
                fill(key, level + 1)

    fill(ATTR_PREFIX, 1)
    return out


@dataclass(frozen=True)
class Round:
    attributes: tuple[dict[str, str], dict[str, str]]  # of the llm child, of the tool child
    reward: float | None


@dataclass(frozen=True)
class Tokens:
    """One LLM call's token ids and the response's logprobs, as a tracer records them."""

    prompt: list[int]
    response: list[int]
    logprobs: list[float]

    def attributes(self) -> dict[str, list[int] | list[float]]:
        return {semconv.PROMPT_TOKEN_IDS: self.prompt, semconv.RESPONSE_TOKEN_IDS: self.response,
                semconv.RESPONSE_LOGPROBS: self.logprobs}  # fmt: skip


@dataclass(frozen=True)
class Plan:
    rounds: list[Round]
    final_reward: float
    tokens: list[Tokens]  # per round; empty when the task asks for none

    @property
    def spans(self) -> int:
        """Spans the attempt emits: 3 per round, the intermediate rewards, the final span and reward."""
        return 3 * len(self.rounds) + sum(r.reward is not None for r in self.rounds) + 2

    @property
    def triplets(self) -> int:
        return len(self.rounds)


def plan(task: dict[str, Any]) -> Plan:
    rng = random.Random(task["seed"])
    n = int(task["rounds"])
    name_round, name_child = rng.randrange(n), rng.randrange(2)
    rounds = []
    for r in range(n):
        attrs = (random_attributes(rng), random_attributes(rng))
        if r == name_round:
            attrs[name_child][TASK_NAME_KEY] = task["name"]
        rounds.append(Round(attrs, round(rng.random(), 6) if rng.random() < 0.5 else None))
    k = int(task.get("tokens", 0))
    token_rng = random.Random(f"tokens-{task['seed']}")  # its own stream: the plan above does not depend on it
    tokens = [Tokens([token_rng.randrange(100, 5000) for _ in range(k)], [token_rng.randrange(100, 5000) for _ in range(k)],
                     [round(-token_rng.uniform(0.1, 5.0), 4) for _ in range(k)]) for _ in range(n)] if k > 0 else []  # fmt: skip
    return Plan(rounds, float(task["final_reward"]), tokens)


def make_tasks(n: int, *, seed: int = 0, sleep: float = 0.01, prefix: str = "task", tokens: int = 0) -> list[dict[str, Any]]:
    """``tokens`` > 0: trainable triplets (see the module's docstring)."""
    rng = random.Random(seed)
    extra = {"tokens": tokens} if tokens > 0 else {}
    return [
        {"name": f"{prefix}-{i:06d}-{_text(rng, 4, 8)}", "seed": rng.getrandbits(32), "rounds": rng.randint(1, 10),
         "final_reward": round(rng.uniform(1.0, 2.0), 6), "sleep": sleep, **extra}
        for i in range(n)
    ]  # fmt: skip


@rollout
async def workload_agent(task: dict) -> None:
    sleep = float(task.get("sleep", 0.01))
    p = plan(task)
    for index, rnd in enumerate(p.rounds):
        with agl.operation(name="workload.round", **{"workload.round": index}):
            await asyncio.sleep(sleep)
            llm_attrs = {**rnd.attributes[0], **(p.tokens[index].attributes() if p.tokens else {})}
            for name, attrs in zip(("workload.llm", "workload.tool"), (llm_attrs, rnd.attributes[1])):
                with _otel.start_as_current_span(name, attributes=attrs):
                    await asyncio.sleep(sleep)
        if rnd.reward is not None:
            agl.emit_reward(rnd.reward)
    with agl.operation(name="workload.final"):
        await asyncio.sleep(sleep)
    agl.emit_reward(p.final_reward)
