"""Benchmark: Kafka -> ClickHouse sink throughput, next to the raw parts measured in the same run.

Numbers (all against the same broker and the same embedded ClickHouse engine):

* ``raw_consume``: spans/s a bare group-less ``RecordConsumer`` fetches from ``agl.spans`` (no decoding);
* ``raw_insert_spans`` / ``raw_insert_triplets``: rows/s of ``insert_arrow`` of pre-built pyarrow
  tables into scratch copies of the tables (no Kafka, no decoding);
* ``sink_spans`` / ``sink_triplets``: records/s and rows/s from the topic to rows in the table
  (decode, convert, insert, commit), timed from the sink's first fetch to the last row;
* ``finish_to_row``: p50/p99 seconds from a trajectory's ``finished_at`` (set when it is produced at
  a steady rate while the sink runs) to its row's ``InsertedAt`` - the sink's share of the
  finish -> triplet-row latency.

Run: ``python tests/benchmarks/bench_sinks.py [--spans 20000] [--trajectories 2000] [--json out.json]``
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
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agl_stream.broker import LocalBroker, local_broker  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.kafka import RecordConsumer, RecordProducer  # noqa: E402
from agl_stream.types import Span, SpanContext, Trajectory, Triplet  # noqa: E402
from agl_stream_processors.clickhouse import ClickHouse, connect, migrate  # noqa: E402
from agl_stream_processors.clickhouse.columns import ColumnBatch  # noqa: E402
from agl_stream_processors.sinks import SinkOptions, SinkService  # noqa: E402
from agl_stream_processors.sinks.specs import SINKS  # noqa: E402
from agl_stream_topics.admin import ensure_topics  # noqa: E402

TOKENS = 256


def make_span(i: int, now: float) -> Span:
    rollout = f"ro-{i // 10:012x}"
    span_id = f"{i:016x}"
    return Span(
        rollout_id=rollout, attempt_id="at-00000001", sequence_id=i % 10 + 1, trace_id=f"{i // 10:032x}",
        span_id=span_id, parent_id=f"{i - 1:016x}" if i % 10 else None, name="openai.chat.completion",
        attributes={"gen_ai.request.model": "tiny", "gen_ai.usage.prompt_tokens": 64, "agl.note": "x" * 400,
                    "prompt_token_ids": list(range(64))},
        start_time=now, end_time=now + 0.01, context=SpanContext(trace_id=f"{i // 10:032x}", span_id=span_id),
    )  # fmt: skip


def make_trajectory(i: int, finished_at: Optional[float] = None) -> Trajectory:
    return Trajectory(
        rollout_id=f"ro-{i:012x}", attempt_id="at-00000001", group_id=f"g-{i // 8}", mode="train",
        final_reward=1.0, adapter="TracerTraceToTriplet", span_count=10, finished_at=finished_at or time.time(),
        triplets=[Triplet(prompt={"token_ids": list(range(TOKENS))}, response={"token_ids": list(range(TOKENS)),
                  "logprobs": [-0.1] * TOKENS}, reward=1.0 if k else None, policy_version=1) for k in range(2)],
    )  # fmt: skip


async def produce(settings: Settings, topic: str, records: list[tuple[str, Any]]) -> None:
    async with RecordProducer(settings) as producer:
        await producer.send_many(settings.topic(topic), records)


async def raw_consume(settings: Settings, topic: str, expected: int) -> float:
    consumer = RecordConsumer(settings, [settings.topic(topic)], group_id=None, max_poll_records=5000)
    await consumer.start()
    try:
        seen, t0 = 0, time.perf_counter()
        while seen < expected:
            seen += len(await consumer.getmany(timeout=1.0))
        return seen / (time.perf_counter() - t0)
    finally:
        await consumer.stop(commit=False)


def raw_insert(ch: ClickHouse, name: str, values: list[Any]) -> tuple[float, int]:
    spec = SINKS[name]
    batch = ColumnBatch(spec.schema)
    for value in values:
        batch.rows.extend(spec.to_rows(value, None))
    table = batch.to_arrow()
    scratch = f"bench_{spec.table}"
    ch.command(f"CREATE TABLE IF NOT EXISTS {scratch} AS {spec.table}")
    t0 = time.perf_counter()
    for start in range(0, table.num_rows, 5000):
        ch.insert_arrow(scratch, table.slice(start, 5000))
    elapsed = time.perf_counter() - t0
    ch.command(f"DROP TABLE {scratch}")
    return table.num_rows / elapsed, table.num_rows


async def run_sink(settings: Settings, ch: ClickHouse, name: str, expected_rows: int) -> tuple[float, float]:
    """(records/s, rows/s) from the sink's first fetch until ``expected_rows`` rows are counted."""
    service = SinkService(settings, [name], ch=ch, options=SinkOptions(batch_size=5000, max_wait=0.2), apply_migrations=False)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    while not (service.sinks and service.sinks[0].stats.ready):
        await asyncio.sleep(0.005)
    t0 = time.perf_counter()
    stats = service.sinks[0].stats
    while stats.rows < expected_rows:
        await asyncio.sleep(0.005)
        if task.done():
            task.result()
            raise RuntimeError("sink stopped early")
    elapsed = time.perf_counter() - t0
    stop.set()
    await task
    return stats.records / elapsed, stats.rows / elapsed


async def finish_to_row(settings: Settings, ch: ClickHouse, count: int, rate: float) -> dict[str, float]:
    service = SinkService(settings, ["triplets"], ch=ch, options=SinkOptions(batch_size=5000, max_wait=0.1), apply_migrations=False)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    while not (service.sinks and service.sinks[0].stats.ready):
        await asyncio.sleep(0.01)
    base = 10_000_000
    async with RecordProducer(settings) as producer:
        t0 = time.perf_counter()
        for i in range(count):
            await producer.send(settings.topic("triplets"), make_trajectory(base + i, time.time()), key=f"ro-{base + i:012x}")
            await asyncio.sleep(max(0.0, t0 + (i + 1) / rate - time.perf_counter()))
        await producer.flush()
    while service.sinks[0].stats.rows < 2 * count:
        await asyncio.sleep(0.01)
    stop.set()
    await task
    cols, rows = await asyncio.to_thread(
        ch.query_rows,
        "SELECT quantileExact(0.5)(d), quantileExact(0.99)(d), max(d), count() FROM "
        "(SELECT toFloat64(min(InsertedAt)) - toFloat64(any(FinishedAt)) AS d FROM triplets "
        "WHERE RolloutId >= {lo:String} GROUP BY RolloutId, AttemptId)",
        {"lo": f"ro-{base:012x}"},
    )
    p50, p99, worst, n = rows[0]
    return {"p50_s": p50, "p99_s": p99, "max_s": worst, "samples": n, "rate_per_s": rate}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    broker: Optional[LocalBroker] = None
    bootstrap = os.environ.get("AGL_KAFKA_BOOTSTRAP")
    if not bootstrap:
        broker = local_broker().start()
        bootstrap = broker.bootstrap
    data_dir = Path(tempfile.mkdtemp(prefix="agl-bench-sinks-"))
    settings = Settings.from_env(env={}, kafka_bootstrap=bootstrap, topic_prefix=f"bench{secrets.token_hex(3)}",
                                 partitions=4, kafka_session_timeout_ms=6000, data_dir=data_dir)  # fmt: skip
    try:
        await ensure_topics(settings, strict=True)
        now = time.time()
        spans = [make_span(i, now) for i in range(args.spans)]
        trajectories = [make_trajectory(i) for i in range(args.trajectories)]
        await produce(settings, "spans", [(s.rollout_id, s) for s in spans])
        await produce(settings, "triplets", [(t.rollout_id, t) for t in trajectories])
        results: dict[str, Any] = {"spans": args.spans, "trajectories": args.trajectories, "triplets_per_trajectory": 2}
        results["raw_consume_spans_per_s"] = await raw_consume(settings, "spans", args.spans)
        results["raw_consume_trajectories_per_s"] = await raw_consume(settings, "triplets", args.trajectories)
        ch = connect(settings.effective_clickhouse_dsn)
        try:
            migrate(ch)
            results["raw_insert_span_rows_per_s"], _ = raw_insert(ch, "spans", spans)
            results["raw_insert_triplet_rows_per_s"], _ = raw_insert(ch, "triplets", trajectories)
            results["sink_spans_per_s"], _ = await run_sink(settings, ch, "spans", args.spans)
            results["sink_trajectories_per_s"], results["sink_triplet_rows_per_s"] = await run_sink(
                settings, ch, "triplets", 2 * args.trajectories
            )
            results["finish_to_row"] = await finish_to_row(settings, ch, args.latency_trajectories, args.latency_rate)
        finally:
            ch.close()
        return results
    finally:
        if broker is not None:
            broker.stop()


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Kafka -> ClickHouse sinks ({results['spans']} spans, {results['trajectories']} trajectories)")
    table.add_column("measurement")
    table.add_column("rate", justify="right")
    rows = [
        ("raw broker consume, spans", f"{results['raw_consume_spans_per_s']:,.0f} records/s"),
        ("raw ClickHouse insert_arrow, span rows", f"{results['raw_insert_span_rows_per_s']:,.0f} rows/s"),
        ("sink agl.spans -> spans", f"{results['sink_spans_per_s']:,.0f} spans/s"),
        ("raw broker consume, trajectories", f"{results['raw_consume_trajectories_per_s']:,.0f} records/s"),
        ("raw ClickHouse insert_arrow, triplet rows", f"{results['raw_insert_triplet_rows_per_s']:,.0f} rows/s"),
        ("sink agl.triplets -> triplets", f"{results['sink_trajectories_per_s']:,.0f} trajectories/s = {results['sink_triplet_rows_per_s']:,.0f} triplets/s"),
    ]  # fmt: skip
    lat = results["finish_to_row"]
    rows.append(
        (f"finish -> triplet row at {lat['rate_per_s']:.0f} trajectories/s", f"p50 {lat['p50_s']:.3f} s, p99 {lat['p99_s']:.3f} s, max {lat['max_s']:.3f} s")
    )
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--trajectories", type=int, default=2_000)
    parser.add_argument("--latency-trajectories", type=int, default=1_000)
    parser.add_argument("--latency-rate", type=float, default=250.0, help="trajectories/s produced in the latency phase")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    print_table(outcome)
    if arguments.json:
        arguments.json.write_text(json.dumps(outcome, indent=2))
