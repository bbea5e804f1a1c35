"""Benchmark: spans/s one runner process exports, next to raw aiokafka produce of same-size records.

Three numbers, all measured in the same run against the same broker:

* ``raw_aiokafka``: a bare ``AIOKafkaProducer`` sending pre-encoded records of the span size;
* ``sdk_export``: spans emitted with ``emit_message`` inside one attempt until the export pipeline
  confirmed them, plus the agent thread's own cost per span (the part the agent pays);
* ``runner``: ``LitAgentRunner`` executing rollouts from ``agl.tasks`` (each emitting spans and a
  reward), measured from the first started to the last finished attempt.

Run: ``python tests/benchmarks/bench_runner_export.py [--spans 20000] [--rollouts 400] [--json out.json]``
(uses ``AGL_KAFKA_BOOTSTRAP`` if set, else starts a local Tansu broker).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiokafka import AIOKafkaProducer  # noqa: E402

from agl_stream.broker import local_broker  # noqa: E402
from agl_stream.client import StoreClient  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.emitter import emit_message, emit_reward  # noqa: E402
from agl_stream.litagent import rollout  # noqa: E402
from agl_stream.runner import LitAgentRunner  # noqa: E402
from agl_stream.serialization import encode  # noqa: E402
from agl_stream.tracer import create_tracer  # noqa: E402
from agl_stream.types import Span  # noqa: E402

SPANS_PER_ROLLOUT = 10
PAYLOAD = "x" * 200


def _sample_record_size() -> int:
    span = Span(rollout_id="ro-000000000000", attempt_id="at-00000000", sequence_id=1, trace_id="a" * 32,
                span_id="b" * 16, name="agentlightning.message",
                attributes={"agentlightning.message.body": PAYLOAD})  # fmt: skip
    return len(encode(span)) + 300  # + resource attributes the tracer adds


async def raw_produce_rate(settings: Settings, n: int, size: int) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, linger_ms=5, max_batch_size=512 * 1024, acks="all")
    await producer.start()
    payload = b"x" * size
    topic = settings.topic("spans")
    try:
        start = time.perf_counter()
        futures = [await producer.send(topic, payload, key=f"ro-{i % 64:012d}".encode()) for i in range(n)]
        await asyncio.gather(*futures)
        return n / (time.perf_counter() - start)
    finally:
        await producer.stop()


def sdk_export_rate(settings: Settings, n: int) -> dict[str, float]:
    tracer = create_tracer(settings)
    tracer.init()
    try:
        start = time.perf_counter()
        with tracer.attempt_scope(rollout_id="ro-bench0000000", attempt_id="at-bench000"):
            for _ in range(n):
                emit_message(PAYLOAD)
        emitted = time.perf_counter()
        tracer.pipeline.flush(timeout=300)
        done = time.perf_counter()
    finally:
        tracer.teardown()
    return {"spans_per_s": n / (done - start), "agent_us_per_span": (emitted - start) / n * 1e6}


@rollout
async def _bench_agent(task: dict) -> None:
    for _ in range(SPANS_PER_ROLLOUT - 1):
        emit_message(PAYLOAD)
    emit_reward(1.0)


async def runner_rate(settings: Settings, rollouts: int, concurrency: int) -> dict[str, float]:
    async with StoreClient(settings) as store:
        await store.enqueue_many_rollouts([{"input": {"i": i}} for i in range(rollouts)])
    runner = LitAgentRunner(_bench_agent, settings, concurrency=concurrency, max_rollouts=rollouts, heartbeat_interval=5)
    first_started: list[float] = []
    original = runner._launch

    def launch(decoded: Any) -> None:
        if not first_started:
            first_started.append(time.perf_counter())
        original(decoded)

    runner._launch = launch  # type: ignore[method-assign]
    stats = await runner.run()
    elapsed = time.perf_counter() - first_started[0]
    return {"rollouts_per_s": stats.rollouts_done / elapsed, "spans_per_s": stats.spans / elapsed,
            "spans": stats.spans, "failed": stats.rollouts_failed}  # fmt: skip


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from agl_stream_topics.admin import ensure_topics

    bootstrap = os.environ.get("AGL_KAFKA_BOOTSTRAP")
    broker = None if bootstrap else local_broker().start()
    try:
        settings = Settings.from_env(env={}, kafka_bootstrap=bootstrap or broker.bootstrap,  # type: ignore[union-attr]
                                     topic_prefix=f"bench{secrets.token_hex(3)}", partitions=4,
                                     kafka_session_timeout_ms=6000)  # fmt: skip
        await ensure_topics(settings, strict=True)
        size = _sample_record_size()
        raw = await raw_produce_rate(settings, args.spans, size)
        sdk = await asyncio.to_thread(sdk_export_rate, settings, args.spans)
        run = await runner_rate(settings, args.rollouts, args.concurrency)
    finally:
        if broker is not None:
            broker.stop()
    return {
        "record_bytes": size,
        "raw_aiokafka_records_per_s": round(raw),
        "sdk_export_spans_per_s": round(sdk["spans_per_s"]),
        "sdk_export_vs_raw": round(sdk["spans_per_s"] / raw, 3),
        "agent_thread_us_per_span": round(sdk["agent_us_per_span"], 1),
        "runner_spans_per_s": round(run["spans_per_s"]),
        "runner_rollouts_per_s": round(run["rollouts_per_s"], 1),
        "runner_vs_raw": round(run["spans_per_s"] / raw, 3),
        "runner_failed_rollouts": run["failed"],
        "params": {"spans": args.spans, "rollouts": args.rollouts, "spans_per_rollout": SPANS_PER_ROLLOUT,
                   "concurrency": args.concurrency},  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results = asyncio.run(main_async(args))
    for key, value in results.items():
        print(f"{key:32s} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
