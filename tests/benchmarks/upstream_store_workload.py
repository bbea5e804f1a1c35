"""Upstream's store-benchmark workload, run by upstream's own ``Trainer`` against any store URL.

Runs with the side venv's python (agentlightning 0.3.0, never a dependency of agl-stream)::

    .agl/upstream-venv/bin/python tests/benchmarks/upstream_store_workload.py --store-url URL \
        [--total-tasks 1024] [--batch-size 128] [--n-runners 8] [--max-rounds 10] [--sleep-seconds 0.01]

The shape is upstream's ``tests/benchmark/benchmark_store.py`` in batch mode (written here from its
description, not copied): ``agl.Trainer(store=LightningStoreClient(url),
strategy=ClientServerExecutionStrategy(managed_store=False, n_runners=N))``, so N upstream runner
processes talk to the store over HTTP exactly as an upstream deployment's runners do. (Upstream's
file passes ``n_runners`` to the Trainer only; with a strategy instance the strategy's own default
of 1 wins, so it runs one runner. Here the N goes where it takes effect.) The algorithm publishes
an ``LLM`` resource per batch, enqueues ``--batch-size`` rollouts, polls ``wait_for_rollouts(timeout=0)``
every 5 s, and checks every finished rollout from ``query_spans(attempt_id="latest")``: it succeeded,
one span carries its task name, and upstream's ``find_final_reward`` is in [1, 2]. The agent runs
1..max_rounds rounds of an ``agentN`` span with two nested children carrying random flattened
attributes, an intermediate reward half the time, then a ``final`` span and the final reward.

Prints one JSON line: ``rollouts``, ``verified``, ``seconds`` (first enqueue -> last verified rollout),
``rollouts_per_s``, ``spans_checked``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import string
import time
from typing import Any, Optional

import agentlightning as agl
from agentlightning.utils.otel import get_tracer

POLL_SECONDS = 5.0  # upstream's batch mode sleeps this long between polls
_ALPHABET = string.ascii_letters + string.digits


def _text(low: int, high: int) -> str:
    return "".join(random.choices(_ALPHABET, k=random.randint(low, high)))


def random_attributes() -> dict[str, str]:
    """Nested random attributes (depth 1-3, breadth 2-6, keys 3-20 chars, values 5-300 chars), flattened."""
    depth = random.randint(1, 3)
    out: dict[str, str] = {}

    def fill(prefix: str, level: int) -> None:
        for _ in range(random.randint(2, 6)):
            key = f"{prefix}.{_text(3, 20)}" if prefix else _text(3, 20)
            if level == depth:
                out[key] = _text(5, 300)
            else:
                fill(key, level + 1)

    fill("", 1)
    return out


def make_agent(max_rounds: int, sleep_seconds: float) -> Any:
    @agl.rollout
    async def agent(task: str, llm: agl.LLM) -> None:
        tracer = get_tracer()
        rounds = random.randint(1, max_rounds)
        task_round = random.randrange(rounds)
        for i in range(rounds):
            with tracer.start_as_current_span(f"agent{i}"):
                for part in (1, 2):
                    with tracer.start_as_current_span(f"round{i}_{part}") as span:
                        await asyncio.sleep(random.uniform(0.0, sleep_seconds))
                        span.set_attributes(random_attributes())
                        if part == 1 and i == task_round:
                            span.set_attribute("task", task)
            if random.random() < 0.5:
                agl.emit_reward(random.uniform(0.0, 1.0))
        with tracer.start_as_current_span("final") as span:
            await asyncio.sleep(random.uniform(0.0, sleep_seconds))
            span.set_attributes(random_attributes())
        agl.emit_reward(random.uniform(1.0, 2.0))

    return agent


def check_spans(spans: list[agl.Span], task: str) -> None:
    if not any(span.attributes.get("task") == task for span in spans):
        raise ValueError(f"task {task} not found among {len(spans)} spans")
    final = agl.find_final_reward(spans)
    if final is None or not 1.0 <= final <= 2.0:
        raise ValueError(f"final reward {final} not in [1, 2]")


class BatchAlgorithm(agl.Algorithm):
    def __init__(self, total: int, batch: int) -> None:
        super().__init__()
        self.total, self.batch = total, batch
        self.result: dict[str, Any] = {}

    async def run(self, train_dataset: Optional[Any] = None, val_dataset: Optional[Any] = None) -> None:
        store = self.get_store()
        submitted = verified = spans_checked = 0
        started: Optional[float] = None
        while submitted < self.total:
            await store.add_resources({"llm": agl.LLM(endpoint=f"http://localhost:{submitted}/v1", model=f"m-{submitted}")})
            batch: dict[str, str] = {}
            started = started or time.perf_counter()
            for _ in range(min(self.batch, self.total - submitted)):
                name = f"task-{submitted}-generated"
                rollout = await store.enqueue_rollout(input=name, mode="train")
                batch[rollout.rollout_id] = name
                submitted += 1
            done: set[str] = set()
            last_progress = time.monotonic()
            while len(done) < len(batch):
                finished = await store.wait_for_rollouts(rollout_ids=list(batch), timeout=0.0)
                for rollout in finished:
                    if rollout.rollout_id in done:
                        continue
                    if rollout.status != "succeeded":
                        raise RuntimeError(f"rollout {rollout.rollout_id} ended {rollout.status}")
                    spans = list(await store.query_spans(rollout_id=rollout.rollout_id, attempt_id="latest"))
                    check_spans(spans, batch[rollout.rollout_id])
                    spans_checked += len(spans)
                    done.add(rollout.rollout_id)
                    verified += 1
                    last_progress = time.monotonic()
                if time.monotonic() - last_progress > 300:
                    raise RuntimeError(f"no progress for 300 s; {len(batch) - len(done)} rollouts pending")
                if len(done) < len(batch):
                    await asyncio.sleep(POLL_SECONDS)
            print(f"verified {verified} of {self.total}", flush=True)
        seconds = time.perf_counter() - (started or time.perf_counter())
        self.result = {"rollouts": self.total, "verified": verified, "seconds": round(seconds, 2),
                       "rollouts_per_s": round(verified / seconds, 2), "spans_checked": spans_checked}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store-url", default="http://localhost:4747")
    parser.add_argument("--total-tasks", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--n-runners", type=int, default=8)
    parser.add_argument("--max-rounds", type=int, default=10)
    parser.add_argument("--sleep-seconds", type=float, default=0.01)
    args = parser.parse_args()
    agl.setup_logging("WARNING")
    store = agl.LightningStoreClient(args.store_url)
    algorithm = BatchAlgorithm(args.total_tasks, args.batch_size)
    try:
        # The runner count goes to the strategy: a strategy instance keeps its own n_runners (default 1)
        # over the Trainer's, so upstream's benchmark as written runs one runner whatever --n-runners says.
        strategy = agl.ClientServerExecutionStrategy(managed_store=False, n_runners=args.n_runners)
        trainer = agl.Trainer(store=store, algorithm=algorithm, n_runners=args.n_runners, strategy=strategy)
        trainer.fit(make_agent(args.max_rounds, args.sleep_seconds))
    finally:
        asyncio.run(store.close())
    print(json.dumps(algorithm.result), flush=True)


if __name__ == "__main__":
    main()
