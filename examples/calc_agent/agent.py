"""A multi-turn agent that learns to use a calculator tool (the spirit of upstream's calc_x).

Turn 1: the model sees the question and may reply ``CALC <expression>`` (see ``protocol.py``).
If it does, the agent evaluates the expression and sends ``RESULT <value>`` back as a turn; turn 2
is the model's final answer. A reply without a call is the final answer itself. Both LLM calls are
traced (token ids included), so the trajectory has one triplet per call and the learner trains the
call and the answer alike. The reward is whether the final answer is right; the call's quality is
reported as extra reward dimensions for analysis (``correct`` is the primary one).

Run one task by hand::

    python -m examples.calc_agent.agent --endpoint http://127.0.0.1:8000/v1 --model smollm2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openai import OpenAI

from agl_stream.emitter import emit_reward
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from examples.arithmetic.agent import calculator
from examples.calc_agent.protocol import FEW_SHOT, SYSTEM_PROMPT, EpisodeScore, parse_call, score


@dataclass
class Episode:
    first_reply: str
    final_reply: str
    tool_result: str | None


def solve(question: str, llm: LLM, *, use_tool: bool = True, max_tokens: int = 16) -> Episode:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=300)
    params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 1.0, **llm.sampling_parameters}
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, *FEW_SHOT,
                                      {"role": "user", "content": question}]  # fmt: skip
    first = client.chat.completions.create(model=llm.model, messages=messages, **params)  # type: ignore[arg-type]
    first_reply = first.choices[0].message.content or ""
    expression = parse_call(first_reply) if use_tool else None
    if expression is None:
        return Episode(first_reply, first_reply, None)
    result = calculator(expression)
    messages += [{"role": "assistant", "content": first_reply.strip()}, {"role": "user", "content": f"RESULT {result}"}]
    final = client.chat.completions.create(model=llm.model, messages=messages, **params)  # type: ignore[arg-type]
    return Episode(first_reply, final.choices[0].message.content or "", result)


def run_episode(task: dict[str, Any], llm: LLM) -> EpisodeScore:
    episode = solve(str(task["question"]), llm)
    return score(episode.first_reply, episode.final_reply, str(task["answer"]))


@rollout
def calc_agent(task: dict[str, Any], llm: LLM) -> None:
    """One rollout: the final reward is the task success, with the call's quality beside it."""
    emit_reward(run_episode(task, llm).as_rewards(), primary_key="correct")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--question", default="What is 347 * 29?")
    parser.add_argument("--answer", default="10063")
    args = parser.parse_args()
    ep = solve(args.question, LLM(endpoint=args.endpoint, model=args.model))
    print(ep, score(ep.first_reply, ep.final_reply, args.answer))
