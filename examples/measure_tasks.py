"""Measure the base model's pass@1 and pass@k per task and difficulty tier, on the embedded engine.

For every candidate (an agent and a tier) ``--questions`` questions are each answered ``--k``
times by sampling (temperature 1.0, as in training); pass@1 is the mean success over all samples
and pass@k the fraction of questions with at least one right answer among the k (for a quiz, several questions
per episode, the success is the fraction right and pass@k is per question; "all right" is the fraction of
episodes with every question right). For the
calculator agent the fraction of episodes with a well-formed call and with a correct call are
reported too. RL can only sharpen what the model sometimes does: train where pass@k is well above
pass@1. Writes a markdown table (``--out``)::

    .venv/bin/python -m examples.measure_tasks --model smollm2 --questions 32 --k 8 --out docs/task-difficulty.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.progress import Progress

from agl_stream.types import LLM
from examples.arithmetic.agent import solve as solve_direct
from examples.arithmetic.tiers import make_tier
from examples.calc_agent.agent import run_episode as calc_episode
from examples.calc_agent.chain import CHAIN_TIERS, make_chain
from examples.calc_agent.chain import run_episode as chain_episode
from examples.calc_agent.quiz import QUIZ_TIERS, make_quiz
from examples.calc_agent.quiz import run_episode as quiz_episode
from examples.arithmetic.reward import is_correct

console = Console()


def direct_episode(task: dict[str, Any], llm: LLM) -> dict[str, float]:
    reply = solve_direct(task, llm)
    return {"correct": float(is_correct(reply, task["answer"]))}


AGENTS: dict[str, Callable[[dict[str, Any], LLM], dict[str, float]]] = {
    "direct": direct_episode,
    "calculator": lambda task, llm: calc_episode(task, llm).as_rewards(),
    "chain": chain_episode,  # one operation per call: 3-4 LLM calls per episode (examples/calc_agent/chain.py)
    "quiz": quiz_episode,  # several calculator questions in one conversation (examples/calc_agent/quiz.py)
}
CANDIDATES = [("direct", "add1"), ("direct", "addsub30"), ("direct", "mul2x1"), ("direct", "mul3x2"),
              ("calculator", "addsub30"), ("calculator", "mul2x1"), ("calculator", "mul3x2")]  # fmt: skip


def measure(llm: LLM, agent: str, tier: str, questions: int, k: int, seed: int, progress: Progress) -> dict[str, Any]:
    if tier in CHAIN_TIERS:
        tasks = make_chain(tier, questions, seed)
    elif tier in QUIZ_TIERS:
        tasks = make_quiz(tier, questions, seed)
    else:
        tasks = make_tier(tier, questions, seed)
    jobs = [(i, task) for i, task in enumerate(tasks) for _ in range(k)]
    bar = progress.add_task(f"{agent} / {tier}", total=len(jobs))

    def run(job: tuple[int, dict[str, Any]]) -> tuple[int, dict[str, float]]:
        out = AGENTS[agent](job[1], llm)
        progress.advance(bar)
        return job[0], out

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, jobs))
    per_question: dict[int, list[dict[str, float]]] = {}
    for index, out in results:
        per_question.setdefault(index, []).append(out)
    row: dict[str, Any] = {
        "agent": agent, "tier": tier, "example": tasks[0]["question"], "questions": questions, "k": k,
        "pass@1": statistics.fmean(o["correct"] for _, o in results),
        f"pass@{k}": statistics.fmean(max(o["correct"] for o in outs) for outs in per_question.values()),
    }  # fmt: skip
    if "right" in results[0][1]:  # several questions per episode: pass@k per question, and every one right
        row[f"pass@{k}"] = statistics.fmean(max(o["right"][q] for o in outs)
                                            for outs in per_question.values() for q in range(len(outs[0]["right"])))  # fmt: skip
        row["all right"] = statistics.fmean(o["all_correct"] for _, o in results)
    for key in ("call_well_formed", "call_correct", "tool_calls", "llm_calls"):
        if key in results[0][1]:
            row[key] = statistics.fmean(o[key] for _, o in results)
    return row


def table(rows: list[dict[str, Any]], k: int) -> str:
    lines = [f"| agent | tier | example | pass@1 | pass@{k} | well-formed call | correct call | tool calls | LLM calls | all right |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        call = lambda key: f"{r[key]:.2f}" if key in r else "-"  # noqa: E731
        lines.append(f"| {r['agent']} | {r['tier']} | {r['example']} | {r['pass@1']:.3f} | {r[f'pass@{k}']:.3f} | "
                     f"{call('call_well_formed')} | {call('call_correct')} | {call('tool_calls')} | {call('llm_calls')} | "
                     f"{call('all right')} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny, or a save_pretrained folder")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7, help="question seed (the demo's data use other seeds)")
    parser.add_argument("--only", nargs="*", help="agent/tier pairs, e.g. calculator/mul3x2")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)

    from agl_stream_trainer.engines.embedded import EmbeddedServer
    from agl_stream_trainer.engines.generation import Generator
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer(args.model)
    generator = Generator(model, tokenizer, max_batch_rows=16)
    server = EmbeddedServer(generator, args.model).start()
    llm = LLM(endpoint=f"{server.base_url}/v1", model=args.model)
    candidates = [tuple(c.split("/")) for c in args.only] if args.only else CANDIDATES
    rows, started = [], time.monotonic()
    try:
        with Progress(console=console) as progress:
            for agent, tier in candidates:
                rows.append(measure(llm, agent, tier, args.questions, args.k, args.seed, progress))
                progress.console.print(table(rows[-1:], args.k).splitlines()[-1])
    finally:
        server.stop()
        generator.close()
    text = table(rows, args.k)
    console.print(text)
    console.print(f"{time.monotonic() - started:.0f} s")
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
