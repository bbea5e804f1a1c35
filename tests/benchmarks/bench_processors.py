"""Benchmark: the stream processors (triplet processor, rollout state machine) next to the raw consume rate.

Numbers (same broker, same run):

* ``raw_consume``: records/s a bare group-less ``RecordConsumer`` fetches from ``agl.spans`` (no decoding);
* ``triplets_backlog``: spans/s, trajectories/s and triplets/s the triplet processor turns a backlog of
  finished attempts into acknowledged trajectories (from its partition assignment to the last ack);
* ``finish_to_trajectory``: p50/p99 seconds from an attempt's ``finished`` event (produced at a steady
  rate while the processor runs) to its trajectory record (record timestamps, one clock);
* ``state_machine_backlog``: rollouts/s and input records/s from a backlog of task + started + spans +
  finished per rollout to ``succeeded`` snapshots on ``agl.rollouts`` (from table recovery to the last).

Run: ``python tests/benchmarks/bench_processors.py [--attempts 500] [--spans 8] [--rate 50] [--json out.json]``
(uses ``AGL_KAFKA_BOOTSTRAP`` if set, else starts the local broker: Apache Kafka, or Tansu without Java).
``--processing-guarantee exactly_once --state-machine-only`` evaluates faust's transactions for the state machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agl_stream.broker import describe as describe_broker, local_broker  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.kafka import RecordConsumer, RecordProducer  # noqa: E402
from agl_stream.serialization import decode  # noqa: E402
from agl_stream.types import Attempt, AttemptedRollout, AttemptEvent, Rollout, RolloutSnapshot, Span  # noqa: E402
from agl_stream_processors.state_machine import RolloutStateMachine, StateMachineOptions  # noqa: E402
from agl_stream_processors.triplets import TripletProcessor, TripletProcessorOptions  # noqa: E402
from agl_stream_topics.admin import ensure_topics  # noqa: E402
from tests.benchmarks.process_sampler import ProcessSampler  # noqa: E402

TOKENS = 128


def attempt_spans(rid: str, aid: str, n: int, now: float) -> list[Span]:
    """One agent span, ``n - 2`` LLM calls with token ids, one reward: a typical small attempt."""
    trace = secrets.token_hex(16)
    root = Span(rollout_id=rid, attempt_id=aid, sequence_id=1, trace_id=trace, span_id=secrets.token_hex(8),
                name="agent", attributes={"agent.name": "solver"}, start_time=now, end_time=now + n)  # fmt: skip
    spans = [root]
    for i in range(max(0, n - 2)):
        spans.append(Span(
            rollout_id=rid, attempt_id=aid, sequence_id=i + 2, trace_id=trace, span_id=secrets.token_hex(8),
            parent_id=root.span_id, name="openai.chat.completion", start_time=now + i, end_time=now + i + 0.5,
            attributes={"prompt_token_ids": list(range(TOKENS)), "response_token_ids": list(range(TOKENS // 2)),
                        "gen_ai.response.id": secrets.token_hex(6), "agl.policy_version": 1},
        ))  # fmt: skip
    spans.append(Span(rollout_id=rid, attempt_id=aid, sequence_id=n, trace_id=trace, span_id=secrets.token_hex(8),
                      parent_id=root.span_id, name="agentlightning.annotation", start_time=now + n - 1,
                      end_time=now + n - 1, attributes={"agentlightning.reward.0.value": 1.0}))  # fmt: skip
    return spans


async def produce_attempt(producer: RecordProducer, s: Settings, rid: str, aid: str, n_spans: int,
                          *, decided: bool = False) -> Any:
    futures = [await producer.send(s.topic("spans"), span, key=rid) for span in attempt_spans(rid, aid, n_spans, time.time())]
    finished = AttemptEvent(kind="finished", rollout_id=rid, attempt_id=aid, status="succeeded", span_count=n_spans)
    futures.append(await producer.send(s.topic("attempts"), finished, key=rid))
    if not decided:
        return futures
    # the state machine's terminal snapshot, which decides the trajectory `final` (the triplet benchmark runs no state machine)
    attempt = Attempt(rollout_id=rid, attempt_id=aid, sequence_id=1, status="succeeded")
    done = RolloutSnapshot(rollout=Rollout(rollout_id=rid, status="succeeded"), attempt=attempt, attempts=1)
    futures.append(await producer.send(s.topic("rollouts"), done, key=rid))
    return futures


async def raw_consume(s: Settings, expected: int) -> dict[str, float]:
    async with RecordConsumer(s, [s.topic("spans")], None, max_poll_records=5000) as consumer:
        got, t0 = 0, time.perf_counter()
        while got < expected:
            got += len(await consumer.getmany(timeout=1.0))
        elapsed = time.perf_counter() - t0
    return {"records": got, "seconds": round(elapsed, 3), "records_per_s": round(got / elapsed, 1)}


async def bench_triplets(s: Settings, attempts: int, n_spans: int, rate: float, seconds: float) -> dict[str, Any]:
    async with RecordProducer(s) as producer:
        futures = []
        for a in range(attempts):
            futures += await produce_attempt(producer, s, f"ro-{a:012x}", f"at-{a:08x}", n_spans, decided=True)
        await asyncio.gather(*futures)
    raw = await raw_consume(s, attempts * n_spans)
    processor = TripletProcessor(s, options=TripletProcessorOptions(group_id="bench-triplets", poll_timeout=0.05))
    stop = asyncio.Event()
    task = asyncio.create_task(processor.run(stop))
    while processor.counts["trajectories"] < attempts:
        await asyncio.sleep(0.005)
        if task.done():
            task.result()
    assert processor.first_record_at is not None
    backlog_s = time.monotonic() - processor.first_record_at  # from the first fetched batch to the last ack
    triplets_per_attempt = max(0, n_spans - 2)
    backlog = {
        "spans_per_s": round(attempts * n_spans / backlog_s, 1),
        "trajectories_per_s": round(attempts / backlog_s, 1),
        "triplets_per_s": round(attempts * triplets_per_attempt / backlog_s, 1),
        "seconds": round(backlog_s, 3),
    }
    # steady load: latency from 'finished' to the trajectory record
    finished_ts: dict[str, int] = {}
    latencies: list[float] = []
    async with RecordProducer(s) as producer, RecordConsumer(s, [s.topic("triplets")], None) as out:
        n_live = int(rate * seconds)
        sent = 0
        start = time.perf_counter()
        while sent < n_live or len(latencies) < n_live:
            while sent < n_live and time.perf_counter() - start >= sent / rate:
                rid = f"ro-{attempts + sent:012x}"
                futures = await produce_attempt(producer, s, rid, f"at-{attempts + sent:08x}", n_spans, decided=True)
                meta = await futures[-2]  # the finished event
                finished_ts[rid] = meta.timestamp
                sent += 1
            for record in await out.getmany(timeout=0.01):
                rid = record.key.decode()
                if rid in finished_ts:
                    latencies.append((record.timestamp - finished_ts.pop(rid)) / 1000)
            if time.perf_counter() - start > seconds + 60:
                break
    stop.set()
    await task
    latencies.sort()
    return {
        "raw_consume": raw,
        "triplets_backlog": backlog,
        "finish_to_trajectory": {
            "count": len(latencies),
            "p50_s": round(statistics.median(latencies), 4) if latencies else None,
            "p99_s": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 4) if latencies else None,
            "rate_per_s": rate,
        },
    }


async def bench_state_machine(s: Settings, rollouts: int, n_spans: int, guarantee: str, procs: ProcessSampler,
                              deadline_s: float = 300.0) -> dict[str, Any]:  # fmt: skip
    async with RecordProducer(s) as producer:
        futures = []
        for r in range(rollouts):
            rid, aid = f"ro-{r:012x}", f"at-{r:08x}"
            task = AttemptedRollout(rollout_id=rid, input=r, attempt=Attempt(rollout_id=rid, attempt_id=aid))
            futures.append(await producer.send(s.topic("tasks"), task, key=rid))
            started = AttemptEvent(kind="started", rollout_id=rid, attempt_id=aid)
            futures.append(await producer.send(s.topic("attempts"), started, key=rid))
            futures += await produce_attempt(producer, s, rid, aid, n_spans)
        await asyncio.gather(*futures)
    options = StateMachineOptions(group_id=f"{s.topic_prefix}-bench-sm", processing_guarantee=guarantee)
    machine = RolloutStateMachine(s, options)
    stop = asyncio.Event()
    task = asyncio.create_task(machine.run(stop))
    await machine.ready.wait()
    t0 = time.perf_counter()
    procs.mark()
    done: set[str] = set()
    # read_committed: with transactions, only what a committed transaction wrote counts as published
    async with RecordConsumer(s, [s.topic("rollouts")], None, isolation_level="read_committed") as consumer:
        while len(done) < rollouts and time.perf_counter() - t0 < deadline_s:
            for record in await consumer.getmany(timeout=0.1):
                snap = decode(record.value, RolloutSnapshot)
                if snap.rollout.status == "succeeded":
                    done.add(snap.rollout.rollout_id)
            if task.done():
                task.result()
    elapsed, cpu = time.perf_counter() - t0, sum(procs.cpu_since().values())
    health = machine.health()
    stop.set()
    await task
    records = rollouts * (n_spans + 3)
    return {"state_machine_backlog": {
        "processing_guarantee": guarantee, "succeeded": len(done), "of": rollouts,
        "rollouts_per_s": round(len(done) / elapsed, 1), "records_per_s": round(records / elapsed, 1),
        "seconds": round(elapsed, 3),
        "cpu_ms_per_rollout": round(1000 * cpu / len(done), 2) if done else None,  # this process + the local broker
        "processing_errors": health.get("processing_errors", 0), "dead_letters": health.get("dead_letters", {}),
        "snapshots": health.get("snapshots", 0),
    }}  # fmt: skip


async def main(args: argparse.Namespace, bootstrap: str, data_dir: Path, procs: ProcessSampler) -> dict[str, Any]:
    base = dict(kafka_bootstrap=bootstrap, partitions=args.partitions, kafka_session_timeout_ms=6000, data_dir=data_dir)
    report: dict[str, Any] = {}
    if not args.state_machine_only:
        s1 = Settings.from_env(topic_prefix=f"b{secrets.token_hex(3)}", **base)
        await ensure_topics(s1)
        report.update(await bench_triplets(s1, args.attempts, args.spans, args.rate, args.seconds))
    s2 = Settings.from_env(topic_prefix=f"b{secrets.token_hex(3)}", **base)
    await ensure_topics(s2)
    report.update(await bench_state_machine(s2, args.attempts, args.spans, args.processing_guarantee, procs))
    report["config"] = {"attempts": args.attempts, "spans_per_attempt": args.spans, "partitions": args.partitions}
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--spans", type=int, default=8, help="spans per attempt (>= 3)")
    parser.add_argument("--rate", type=float, default=50.0, help="attempts/s in the latency phase")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the latency phase")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--processing-guarantee", choices=("at_least_once", "exactly_once"), default="at_least_once",
                        help="faust's processing guarantee for the state machine (exactly_once: see StateMachineOptions)")
    parser.add_argument("--state-machine-only", action="store_true", help="skip the triplet processor's phases")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    bootstrap = os.environ.get("AGL_KAFKA_BOOTSTRAP")
    with tempfile.TemporaryDirectory(prefix="agl-bench-processors-") as tmp:  # faust's per-app folder goes here
        if bootstrap:
            report = asyncio.run(main(args, bootstrap, Path(tmp), ProcessSampler()))  # this process only
        else:
            with local_broker() as broker:
                procs = ProcessSampler()  # this process (the apps run in it) and the broker's JVM
                procs.watch("broker", broker.pid)
                report = asyncio.run(main(args, broker.bootstrap, Path(tmp), procs))
                report["broker"] = describe_broker(broker)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)


if __name__ == "__main__":
    cli()
