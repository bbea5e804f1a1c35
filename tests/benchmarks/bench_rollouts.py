"""Benchmark: the rollout workload end to end (SDK -> broker -> processors -> ClickHouse), every rollout verified.

Modeled on upstream's store benchmark (issue 8, item 2). The driver is the algorithm: it starts
the local stack (Tansu broker, topics, ``agl-stream processors`` with the embedded ClickHouse and
the triplet adapter matching the workload's ``workload.llm`` spans) and ``--runners`` runner
processes of ``tests/benchmarks/workload_agent.py`` (``--concurrency`` attempts each), enqueues
``--rollouts`` rollouts in batches of ``--batch`` (at most two batches outstanding: the next
batch goes in when the previous one finished), waits for every rollout, stops the processors and
checks from ClickHouse that every rollout succeeded, carries its task name among its spans, has
its final reward in [1, 2] (the planned value), and has every span and triplet exactly once
(:func:`tests.faults.harness.audit`).

Figures (all from the same run):

* ``rollouts_per_s``: rollouts / (first enqueue -> the client saw the last rollout terminal);
* ``spans_per_s``: span rows / (first enqueue -> the last span row inserted in ClickHouse);
* ``latency.enqueue_to_succeeded_s`` p50/p99: ``rollouts.EndTime - StartTime`` (the state
  machine's end of the rollout, the client's enqueue time);
* ``latency.enqueue_to_triplet_row_s`` p50/p99: first ``triplets.InsertedAt`` of the rollout
  minus its enqueue time, and ``latency.finish_to_triplet_row_s``: the same minus the attempt's
  ``FinishedAt`` (the DESIGN target: p99 <= 1 s);
* ``rss_mb``: peak RSS of every runner process, of the processors, and of this driver (psutil,
  sampled every 0.25 s);
* ``raw.produce_records_per_s``: a bare ``AIOKafkaProducer`` sending records of the average span
  size to the same broker right after the run, and ``raw.clickhouse_insert_rows_per_s``:
  ``insert_arrow`` of span rows built from the run's spans into a scratch table; the ratios
  ``ratio.spans_vs_raw_produce`` and ``ratio.spans_vs_raw_insert`` compare the end-to-end rate.

Run: ``python tests/benchmarks/bench_rollouts.py [--rollouts 1024] [--batch 128] [--runners 8]
[--concurrency 8] [--partitions 8] [--sleep 0.01] [--json out.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
# the server side: the broker (the JVM, for Apache Kafka), its trimmer, and the processors with the embedded engine
SERVER_ROLES = ("broker.", "topics.", "processors.")
sys.path.insert(0, str(ROOT))

from agl_stream.broker import describe as describe_broker  # noqa: E402
from agl_stream.client import StoreClient  # noqa: E402
from agl_stream.client.sql_ids import in_lists  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.execution.local_stack import LocalStack  # noqa: E402
from agl_stream.service import ServiceProcess  # noqa: E402
from tests.benchmarks.workload_agent import ADAPTER_SPEC, make_tasks, plan  # noqa: E402
from tests.benchmarks.process_sampler import ProcessSampler  # noqa: E402
from tests.benchmarks.soak_report import Sample, checkpoints, held_sizes, judge, markdown_table, plot  # noqa: E402
from tests.faults.audit import Enqueued, audit  # noqa: E402
from tests.faults.harness import AGENT  # noqa: E402

logger = logging.getLogger("bench_rollouts")


# ---------------------------------------------------------------- raw rates


async def raw_produce_rate(settings: Settings, n: int, size: int, partitions: int) -> float:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = settings.topic("bench-raw")
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, linger_ms=5, max_batch_size=512 * 1024,
                                acks="all", max_request_size=8 * 2**20)  # fmt: skip
    await producer.start()
    payload = b"x" * size
    try:
        start = time.perf_counter()
        futures = [await producer.send(topic, payload, key=f"ro-{i % 256:012d}".encode()) for i in range(n)]
        await asyncio.gather(*futures)
        return n / (time.perf_counter() - start)
    finally:
        await producer.stop()


async def sample_spans(settings: Settings, n: int) -> tuple[list[Any], float]:
    """Up to ``n`` spans of the run, decoded, and the average encoded record size of all read."""
    from agl_stream.kafka import RecordConsumer
    from agl_stream.serialization import encode
    from agl_stream.types import Span

    consumer = RecordConsumer(settings, [settings.topic("spans")], group_id=None, max_poll_records=2000)
    await consumer.start()
    spans: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(spans) < n and time.monotonic() < deadline:
            good, _bad = await consumer.get_decoded(Span, timeout=0.5)
            if not good and spans:
                break
            spans.extend(d.value for d in good)
    finally:
        await consumer.stop(commit=False)
    spans = spans[:n]
    size = statistics.fmean(len(encode(s)) for s in spans) if spans else 1000.0
    return spans, size


def raw_insert_rate(ch: Any, spans: list[Any], min_rows: int = 5000) -> float:
    from agl_stream_processors.clickhouse.columns import ColumnBatch
    from agl_stream_processors.sinks.specs import SINKS

    spec = SINKS["spans"]
    batch = ColumnBatch(spec.schema)
    while len(batch.rows) < min_rows and spans:
        for value in spans:
            batch.rows.extend(spec.to_rows(value, None))
    table = batch.to_arrow()
    scratch = "bench_raw_spans"
    ch.command(f"CREATE TABLE IF NOT EXISTS {scratch} AS {spec.table}")
    try:
        t0 = time.perf_counter()
        for start in range(0, table.num_rows, 5000):
            ch.insert_arrow(scratch, table.slice(start, 5000))
        return table.num_rows / (time.perf_counter() - t0)
    finally:
        ch.command(f"DROP TABLE {scratch}")


# ---------------------------------------------------------------- the run


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "n": 0}
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]

    return {"p50": q(0.50), "p99": q(0.99), "max": ordered[-1], "n": len(ordered)}


async def wait_runners_started(service: ServiceProcess, n: int, timeout: float = 180.0, log_offset: int = 0) -> None:
    """Wait for ``n`` "runner ... started" lines in the service's log, after byte ``log_offset``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        service.check()
        text = service.log_path.read_bytes()[log_offset:].decode(errors="replace") \
            if service.log_path and service.log_path.exists() else ""  # fmt: skip
        if text.count(" started (concurrency") >= n:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{n} runner processes did not start within {timeout}s:\n{service.tail()}")


async def wait_sinks_caught_up(health_file: Path, spans: int, trajectories: int, timeout: float = 300.0) -> None:
    """The processors' health report shows every span and trajectory written (their first run: counts start at 0)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sinks = json.loads(health_file.read_text())["apps"]["sinks"]
            if sinks["spans"]["records"] >= spans and sinks["triplets"]["records"] >= trajectories \
                    and sinks["spans"]["pending"] == 0 and sinks["triplets"]["pending"] == 0:  # fmt: skip
                return
        except (OSError, ValueError, KeyError):
            pass
        await asyncio.sleep(0.25)
    raise TimeoutError(f"sinks did not catch up within {timeout}s")


async def run_warmup(store: StoreClient, warmup: list[dict[str, Any]], warmup_spans: int, enq: Enqueued, warm_ids: set[str],
                     args: argparse.Namespace, stack: LocalStack, procs: ProcessSampler,
                     health_file: Path) -> dict[str, Any]:  # fmt: skip
    """Run ``warmup`` through the stack before the clock starts (``--warmup``), and say what it cost.

    A long-lived deployment's broker has compiled its hot paths long ago; the local broker's JVM compiles
    them in its first minute (10.8 ms of CPU per rollout in the soak's first 2,000 rollouts, 4-6 after).
    Those rollouts are verified with the rest, and their CPU is reported here, not hidden. It ends when the sinks
    have written them, so the measured window does not start with the warm-up's tail."""
    before = set(enq.tasks)
    procs.mark()
    started = time.time()
    await enqueue_batches(store, warmup, enq, args, stack)
    warm_ids.update(set(enq.tasks) - before)
    done = await store.wait_for_rollouts(rollout_ids=list(warm_ids), timeout=args.timeout)
    if len(done) != len(warm_ids):
        raise RuntimeError(f"only {len(done)} of {len(warm_ids)} warm-up rollouts finished within {args.timeout}s")
    await wait_sinks_caught_up(health_file, warmup_spans, len(warmup))
    cpu = cpu_per_rollout(procs.cpu_since(), len(warm_ids))
    return {"rollouts": len(warm_ids), "duration_s": round(time.time() - started, 2),
            "server_cpu_ms_per_rollout": round(cpu["server_total"], 3)}  # fmt: skip


async def enqueue_batches(store: StoreClient, tasks: list[dict[str, Any]], enq: Enqueued, args: argparse.Namespace,
                          stack: LocalStack) -> None:  # fmt: skip
    """Saturation: batches of ``--batch``, at most two outstanding (the next goes in when the oldest finished)."""
    pending: list[list[str]] = []
    for start in range(0, len(tasks), args.batch):
        chunk = tasks[start : start + args.batch]
        if len(pending) >= 2:
            oldest = pending.pop(0)
            await store.wait_for_rollouts(rollout_ids=oldest, timeout=args.timeout)
        rollouts = await store.enqueue_many_rollouts([{"input": t} for t in chunk])
        for task, ro in zip(chunk, rollouts):
            enq.tasks[ro.rollout_id] = task
            enq.enqueued_at[ro.rollout_id] = ro.start_time
        pending.append([ro.rollout_id for ro in rollouts])
        stack.check()


async def enqueue_at_rate(store: StoreClient, tasks: list[dict[str, Any]], enq: Enqueued, rate: float,
                          stack: LocalStack) -> None:  # fmt: skip
    """Fixed offered load: rollout i goes in at t0 + i / rate, whatever the pipeline does (open loop)."""
    t0 = time.monotonic()
    sent = 0
    while sent < len(tasks):
        due = min(len(tasks), int((time.monotonic() - t0) * rate) + 1)
        if due > sent:
            chunk = tasks[sent:due]
            rollouts = await store.enqueue_many_rollouts([{"input": t} for t in chunk])
            for task, ro in zip(chunk, rollouts):
                enq.tasks[ro.rollout_id] = task
                enq.enqueued_at[ro.rollout_id] = ro.start_time
            sent = due
            stack.check()
        await asyncio.sleep(max(0.0, t0 + sent / rate - time.monotonic()))


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from agl_stream.client.follow import TopicFollower
    from agl_stream.types import RolloutSnapshot

    settings = Settings.from_env(env={}, data_dir=data_dir, partitions=args.partitions, kafka_session_timeout_ms=10_000,
                                 kafka_compression=args.compression)  # fmt: skip
    log_dir = data_dir / "logs"
    stack = LocalStack(settings, processor_args=["--adapter", ADAPTER_SPEC], log_dir=log_dir)
    procs = ProcessSampler().start()
    tasks = make_tasks(args.rollouts, seed=args.seed, sleep=args.sleep)
    warmup = make_tasks(args.warmup, seed=args.seed + 1, sleep=args.sleep, prefix="warmup")
    # counted before the clock starts: planning regenerates every span's random attributes (~8 ms per task),
    # and done inside the CPU window it left the server idle-polling for 170 s at 20,000 rollouts
    warmup_spans = sum(plan(t).spans for t in warmup)
    expected_spans = warmup_spans + sum(plan(t).spans for t in tasks)
    enq = Enqueued()
    succeeded_seen: dict[str, float] = {}  # rollout id -> when this driver saw its 'succeeded' snapshot
    soak: list[Sample] = []  # --soak: every process's CPU and RSS with the rollouts done, every few seconds
    timeline: Optional[asyncio.Task[None]] = None
    warm_ids: set[str] = set()  # --warmup: the rollouts run before the clock starts (verified, not timed)
    measured: list[str] = []

    def on_snapshot(_key: Optional[str], snap: RolloutSnapshot) -> None:
        if snap.rollout.status == "succeeded":
            succeeded_seen.setdefault(snap.rollout.rollout_id, time.time())

    results: dict[str, Any] = {
        "params": {k: getattr(args, k) for k in ("rollouts", "warmup", "batch", "runners", "concurrency", "partitions", "sleep", "rate", "compression")}
    }
    try:
        settings = await stack.start()
        assert stack.broker is not None
        results["broker"] = describe_broker(stack.broker)
        procs.watch("broker", stack.broker.pid)
        procs.watch("processors", stack.service("processors").pid)  # type: ignore[union-attr]
        trimmer = stack.service("topics-trim")  # the local Kafka's trimmer: server-side work too
        procs.watch("topics", trimmer.pid if trimmer else None)
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        runners = stack.start_runners(AGENT, args.runners, concurrency=args.concurrency, env=env)
        procs.watch("runners", runners.pid)
        await wait_runners_started(runners, args.runners)
        await asyncio.sleep(2.0)  # let the consumer group settle its partition assignment
        follower: TopicFollower[RolloutSnapshot] = TopicFollower(settings, "rollouts", RolloutSnapshot, on_snapshot)
        await follower.start()

        async with StoreClient(settings) as store:
            if warmup:
                results["warmup"] = await run_warmup(store, warmup, warmup_spans, enq, warm_ids, args, stack, procs,
                                                     log_dir / "processors.health.json")  # fmt: skip
            procs.mark()  # the CPU window: from the first enqueue until the sinks wrote the last row
            t0 = time.time()
            broker_dir = getattr(stack.broker, "data_dir", None)  # Apache Kafka's log directory (Tansu: memory)
            timeline = asyncio.create_task(record_timeline(procs, succeeded_seen, t0, args.soak_interval, soak, broker_dir,
                                                          log_dir / "processors.health.json", len(warmup))) \
                if args.soak else None  # fmt: skip
            if args.rate:
                await enqueue_at_rate(store, tasks, enq, args.rate, stack)
            else:
                await enqueue_batches(store, tasks, enq, args, stack)
            measured = [rid for rid in enq.tasks if rid not in warm_ids]
            done = await store.wait_for_rollouts(rollout_ids=measured, timeout=args.timeout)
            t_done = time.time()
            if len(done) != len(measured):
                raise RuntimeError(f"only {len(done)} of {len(measured)} rollouts finished within {args.timeout}s")
        if trimmer is not None:
            # the raw rates below sample spans from the topic: the trimmer deletes what every group committed past
            # once it is 2 minutes old, and the drain can take longer than that (the disk's last sample then
            # holds the drain's records too)
            trimmer.stop()
        await wait_sinks_caught_up(log_dir / "processors.health.json", expected_spans, len(tasks))
        cpu = procs.cpu_since()
        if timeline is not None:
            timeline.cancel()
            soak.append(Sample(time.time() - t0, len(measured), procs.snapshot(), folder_mb(broker_dir)))  # all done
        await follower.stop()
        runners.stop()
        stack.service("processors").stop(timeout=60)  # type: ignore[union-attr]  # the processors: ClickHouse is free for this process now
        procs.sample()
        sample, avg_size = await sample_spans(settings, min(expected_spans, 5000))
        if not sample:
            raise RuntimeError(f"no span left on {settings.topic('spans')} to measure the raw rates with")
        raw_n = min(max(expected_spans, 5000), 30000)
        results["raw"] = {"produce_records_per_s": await raw_produce_rate(settings, raw_n, int(avg_size), args.partitions),
                          "produce_records": raw_n, "span_record_bytes": avg_size}  # fmt: skip
    finally:
        stack.stop()
        procs.stop()

    from agl_stream_processors.clickhouse import connect

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        verdict = audit(ch, enq)
        rows, last_span_row = latency_rows(ch, measured)
        results["raw"]["clickhouse_insert_rows_per_s"] = raw_insert_rate(ch, sample)
    finally:
        ch.close()

    succeeded = [r for r in rows if r[2] is not None]
    results["verified"] = {
        "enqueued": verdict.enqueued, "succeeded": verdict.succeeded, "failed": verdict.failed,
        "spans": verdict.spans, "triplets": verdict.triplets, "duplicates": verdict.duplicates, "lost": verdict.lost,
        "ok": verdict.succeeded == verdict.enqueued and not verdict.duplicates and not verdict.lost and not verdict.problems,
    }  # fmt: skip
    if verdict.problems:
        results["verified"]["problems"] = verdict.problems[:20]
    n = len(measured)
    results["rollouts_per_s"] = n / (t_done - t0)
    results["spans_per_s"] = verdict.spans / (last_span_row - t0)
    results["duration_s"] = t_done - t0
    results["latency"] = {
        "enqueue_to_succeeded_s": quantiles([r[2] - r[1] for r in succeeded]),
        "enqueue_to_triplet_row_s": quantiles([r[3] - r[1] for r in rows if r[3]]),
        "finish_to_triplet_row_s": quantiles([r[3] - r[4] for r in rows if r[3] and r[4]]),
        "finish_to_succeeded_snapshot_s": quantiles([succeeded_seen[r[0]] - r[4] for r in rows if r[4] and r[0] in succeeded_seen]),
        "finish_to_succeeded_row_s": quantiles([r[5] - r[4] for r in rows if r[5] and r[4]]),
    }
    results["cpu_ms_per_rollout"] = cpu_per_rollout(cpu, n)
    rss = procs.peak_rss()
    runner_rss = procs.runner_rss()
    results["rss_mb"] = {
        **{key.replace("/", "."): round(mb, 1) for key, mb in sorted(rss.items())},
        "runner_max": runner_rss["max"], "runner_median": runner_rss["median"],
        "processors_max": max((mb for key, mb in rss.items() if key.startswith("processors/")), default=0.0),
        "driver": max((mb for key, mb in rss.items() if key.startswith("driver/")), default=0.0),
    }  # fmt: skip
    if args.soak:
        results["soak"] = soak_results(soak, args)
    results["ratio"] = {
        "spans_vs_raw_produce": results["spans_per_s"] / results["raw"]["produce_records_per_s"],
        "spans_vs_raw_insert": results["spans_per_s"] / results["raw"]["clickhouse_insert_rows_per_s"],
    }
    return results


def latency_rows(ch: Any, rollout_ids: list[str]) -> tuple[list[tuple[Any, ...]], float]:
    """Per rollout: its id, enqueue time, end (state machine), the first triplet row, the final attempt's
    'finished' (runner clock = this machine) and the first 'succeeded' rollouts row; and the last span row's
    insert time (0.0 without spans).

    The ids go in bounded chunks (:mod:`agl_stream.client.sql_ids`): one query naming all of them passes
    ClickHouse's max_query_size from ~4,096 rollouts on. Every row is one rollout's, so the chunks' rows
    together are the whole answer and the last span row is the latest of the chunks' last rows."""
    rows: list[tuple[Any, ...]] = []
    last_span_row = 0.0
    for ids in in_lists(rollout_ids):
        rows += ch.query_rows(
            f"SELECT r.RolloutId, toFloat64(r.StartTime), toFloat64(r.EndTime), t.first_row, f.finished, s.row "
            f"FROM (SELECT RolloutId, StartTime, EndTime, AttemptId FROM rollouts FINAL WHERE RolloutId IN {ids}) AS r "
            f"LEFT JOIN (SELECT RolloutId, AttemptId, toFloat64(min(InsertedAt)) AS first_row FROM triplets FINAL "
            f"WHERE RolloutId IN {ids} GROUP BY RolloutId, AttemptId) AS t ON r.RolloutId = t.RolloutId AND r.AttemptId = t.AttemptId "
            f"LEFT JOIN (SELECT RolloutId, AttemptId, toFloat64(max(Timestamp)) AS finished FROM attempts "
            f"WHERE RolloutId IN {ids} AND Kind = 'finished' GROUP BY RolloutId, AttemptId) AS f "
            f"ON r.RolloutId = f.RolloutId AND r.AttemptId = f.AttemptId "
            f"LEFT JOIN (SELECT RolloutId, toFloat64(min(InsertedAt)) AS row FROM rollouts "
            f"WHERE RolloutId IN {ids} AND Status = 'succeeded' GROUP BY RolloutId) AS s ON r.RolloutId = s.RolloutId"
        )[1]
        last = ch.scalar(f"SELECT toFloat64(max(InsertedAt)) FROM spans WHERE RolloutId IN {ids}")
        last_span_row = max(last_span_row, float(last or 0.0))
    return rows, last_span_row


def folder_mb(path: Optional[Path]) -> Optional[float]:
    """Bytes on disk under ``path`` (allocated blocks, as ``du``: Kafka's index files are sparse), in MiB."""
    if path is None or not path.exists():
        return None
    total = 0
    for item in path.rglob("*"):
        try:
            total += item.lstat().st_blocks * 512
        except OSError:  # a segment deleted while walking
            pass
    return total / 2**20


async def record_timeline(procs: ProcessSampler, succeeded: dict[str, float], t0: float, interval: float,
                          out: list[Sample], broker_dir: Optional[Path] = None,
                          health_file: Optional[Path] = None, already_done: int = 0) -> None:  # fmt: skip
    """Every ``interval`` s: each process's CPU and RSS with the rollouts seen succeeded so far (soak mode),
    the broker's disk when it keeps its data in ``broker_dir``, and what the processors hold; ``already_done``:
    the warm-up's rollouts, not counted."""
    while True:  # the sampler's own thread reads /proc every 0.25 s: its latest readings are fresh enough
        disk = await asyncio.to_thread(folder_mb, broker_dir)
        out.append(Sample(time.time() - t0, max(0, len(succeeded) - already_done), procs.snapshot(), disk, held_sizes(health_file)))
        await asyncio.sleep(interval)


def soak_results(samples: list[Sample], args: argparse.Namespace) -> dict[str, Any]:
    """Checkpoints every ``--soak-every`` rollouts, the long-run verdict, the table, and the PNG if asked."""
    points = checkpoints(samples, args.soak_every)
    verdict = judge(points)
    if args.plot:
        plot(points, samples, args.plot, f"soak: {args.rollouts:,} rollouts, batches of {args.batch}, {args.runners} runners x "
             f"{args.concurrency}, {args.partitions} partitions, {os.cpu_count()} cores")  # fmt: skip
    return {
        "every": args.soak_every,
        "checkpoints": [{"rollouts": c.sample.done, "t": round(c.sample.t, 1), "server_cpu_ms_per_rollout": round(c.server_cpu_ms, 3),
                         "cpu_ms_per_rollout": {k: round(v, 3) for k, v in c.cpu_ms_per_rollout.items()},
                         "rss_mb": {k: round(v, 1) for k, v in c.rss.items()}} for c in points],
        "verdict": verdict.to_json(),
        "table": markdown_table(points),
        "samples": [s.to_json() for s in samples],
    }  # fmt: skip


def cpu_per_rollout(cpu: dict[str, float], rollouts: int) -> dict[str, float]:
    """CPU milliseconds per rollout for every process kind, and the server-side / runner totals."""
    per = {key.replace("/", "."): 1000.0 * seconds / rollouts for key, seconds in sorted(cpu.items())}
    server = sum(v for k, v in per.items() if k.startswith(SERVER_ROLES))
    runners = sum(v for k, v in per.items() if k.startswith("runners."))
    return {**per, "server_total": server, "runners_total": runners}


def print_table(r: dict[str, Any]) -> None:
    lat = r["latency"]
    v = r["verified"]
    rows = [
        ("rollouts/s (target >= 40)", f"{r['rollouts_per_s']:.1f}"),
        ("spans/s end to end", f"{r['spans_per_s']:,.0f}"),
        ("raw aiokafka produce, same-size records", f"{r['raw']['produce_records_per_s']:,.0f} records/s "
         f"({r['raw']['span_record_bytes']:,.0f} B)"),
        ("e2e spans/s vs raw produce", f"{100 * r['ratio']['spans_vs_raw_produce']:.1f} %"),
        ("raw ClickHouse insert_arrow, span rows", f"{r['raw']['clickhouse_insert_rows_per_s']:,.0f} rows/s"),
        ("e2e spans/s vs raw insert", f"{100 * r['ratio']['spans_vs_raw_insert']:.1f} %"),
        ("enqueue -> succeeded p50 / p99", f"{lat['enqueue_to_succeeded_s']['p50']:.2f} / {lat['enqueue_to_succeeded_s']['p99']:.2f} s"),
        ("enqueue -> triplet row p50 / p99", f"{lat['enqueue_to_triplet_row_s']['p50']:.2f} / {lat['enqueue_to_triplet_row_s']['p99']:.2f} s"),
        ("finish -> triplet row p50 / p99 (target p99 <= 1 s)", f"{lat['finish_to_triplet_row_s']['p50']:.2f} / {lat['finish_to_triplet_row_s']['p99']:.2f} s"),
        ("finish -> succeeded snapshot / rollouts row p99 (target <= 1 s)",
         f"{lat['finish_to_succeeded_snapshot_s']['p99']:.2f} / {lat['finish_to_succeeded_row_s']['p99']:.2f} s"),
        ("server CPU per rollout: broker + processors (target <= 12 ms)", f"{r['cpu_ms_per_rollout']['server_total']:.1f} ms "
         + "(" + ", ".join(f"{k} {v:.1f}" for k, v in r["cpu_ms_per_rollout"].items() if k.startswith(SERVER_ROLES)) + ")"),
        ("runner CPU per rollout (target <= 25 ms)", f"{r['cpu_ms_per_rollout']['runners_total']:.1f} ms"),
        ("peak RSS runner max / median (target <= 150 MB)", f"{r['rss_mb']['runner_max']:.0f} / {r['rss_mb']['runner_median']:.0f} MB"),
        ("peak RSS processors / driver", f"{r['rss_mb']['processors_max']:.0f} / {r['rss_mb']['driver']:.0f} MB"),
        ("verified from ClickHouse", f"{v['succeeded']}/{v['enqueued']} succeeded, {v['spans']} spans, {v['triplets']} triplets, "
         f"duplicates {v['duplicates']}, lost {v['lost']}"),
    ]  # fmt: skip
    p = r["params"]
    load = f"offered {p['rate']} rollouts/s" if p.get("rate") else f"batches of {p['batch']}"
    print(f"\nrollout workload: {p['rollouts']} rollouts, {load}, {p['runners']} runner processes x "
          f"concurrency {p['concurrency']}, {p['partitions']} partitions, sleep {p['sleep']} s")  # fmt: skip
    width = max(len(k) for k, _ in rows)
    for k, val in rows:
        print(f"  {k:<{width}}  {val}")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runners", type=int, default=8, help="runner processes")
    parser.add_argument("--concurrency", type=int, default=8, help="attempts at once per runner process")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the rollout-keyed topics")
    parser.add_argument("--sleep", type=float, default=0.01, help="agent sleep per span, seconds")
    parser.add_argument("--rate", type=float, default=None,
                        help="fixed offered load in rollouts/s (open loop) instead of saturating batches; e.g. 10")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=0,
                        help="rollouts run before the clock starts (verified, their CPU reported apart; the soak "
                             "uses 1,000 so the broker's JIT warm-up is not read as a change in CPU per rollout)")
    parser.add_argument("--compression", choices=("gzip", "lz4", "zstd"), default=None,
                        help="producers compress record batches (AGL_KAFKA_COMPRESSION)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the rollouts")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the stack's data here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--soak", action="store_true",
                        help="long-run mode: sample every process's RSS and CPU with the rollouts done, judge growth "
                             "(RSS at the end within 20%% of the first checkpoint's, CPU per rollout within 10%%)")
    parser.add_argument("--soak-every", type=int, default=2000, help="soak checkpoint every N rollouts")
    parser.add_argument("--soak-interval", type=float, default=2.0, help="soak sampling interval, seconds")
    parser.add_argument("--plot", type=Path, default=None, help="soak: write the RSS / CPU-per-rollout plot (PNG) here")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        results = asyncio.run(run(args, args.data_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="agl-bench-rollouts-") as tmp:
            results = asyncio.run(run(args, Path(tmp)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))
    print_table(results)
    if args.soak:
        soak = results["soak"]
        print(f"\nsoak, checkpoints every {args.soak_every:,} rollouts:\n{soak['table']}")
        print("soak verdict:", "ok" if soak["verdict"]["ok"] else "; ".join(soak["verdict"]["problems"]))
    if not results["verified"]["ok"]:
        print("VERIFICATION FAILED:", json.dumps(results["verified"], default=str)[:3000], file=sys.stderr)
        sys.exit(1)
    if args.soak and not results["soak"]["verdict"]["ok"]:
        sys.exit(2)  # every rollout verified, but something grows with the work
    return results


if __name__ == "__main__":
    main()
