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
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from agl_stream.client import StoreClient  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.execution.local_stack import LocalStack  # noqa: E402
from agl_stream.execution.process import ServiceProcess  # noqa: E402
from tests.benchmarks.workload_agent import ADAPTER_SPEC, make_tasks, plan  # noqa: E402
from tests.faults.harness import AGENT, Enqueued, audit  # noqa: E402

logger = logging.getLogger("bench_rollouts")


# ---------------------------------------------------------------- memory


class RssSampler:
    """Peak RSS per process of the given process trees (and this process), sampled in a thread."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.roots: dict[str, int] = {}
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, role: str, pid: Optional[int]) -> None:
        if pid is not None:
            self.roots[role] = pid

    def start(self) -> "RssSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def sample(self) -> None:
        procs: list[tuple[str, psutil.Process]] = [("driver", psutil.Process())]
        for role, pid in list(self.roots.items()):
            try:
                root = psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in tree:
                procs.append((f"{role}/{proc.pid}", proc))
        for name, proc in procs:
            try:
                rss = proc.memory_info().rss / 2**20
            except psutil.Error:
                continue
            self.peaks[name] = max(self.peaks.get(name, 0.0), rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def summary(self) -> dict[str, Any]:
        def of(prefix: str) -> list[float]:
            return [v for k, v in self.peaks.items() if k.startswith(prefix + "/")]

        # a runner service is a launcher plus its runner processes; the largest processes are the runners
        runner_all = sorted(of("runners"), reverse=True)
        return {
            "runner_max": max(runner_all, default=0.0),
            "runner_median": statistics.median(runner_all) if runner_all else 0.0,
            "runner_processes": runner_all,
            "processors_max": max(of("processors"), default=0.0),
            "driver": self.peaks.get("driver", 0.0),
        }


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


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = Settings.from_env(env={}, data_dir=data_dir, partitions=args.partitions, kafka_session_timeout_ms=10_000)
    log_dir = data_dir / "logs"
    stack = LocalStack(settings, processor_args=["--adapter", ADAPTER_SPEC], log_dir=log_dir)
    rss = RssSampler().start()
    tasks = make_tasks(args.rollouts, seed=args.seed, sleep=args.sleep)
    enq = Enqueued()
    results: dict[str, Any] = {
        "params": {k: getattr(args, k) for k in ("rollouts", "batch", "runners", "concurrency", "partitions", "sleep")}
    }
    try:
        settings = await stack.start()
        rss.watch("processors", stack.services[0].pid)
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        runners = stack.start_runners(AGENT, args.runners, concurrency=args.concurrency, env=env)
        rss.watch("runners", runners.pid)
        await wait_runners_started(runners, args.runners)
        await asyncio.sleep(2.0)  # let the consumer group settle its partition assignment

        async with StoreClient(settings) as store:
            t0 = time.time()
            pending: list[list[str]] = []
            for start in range(0, len(tasks), args.batch):
                chunk = tasks[start : start + args.batch]
                if len(pending) >= 2:  # at most two batches outstanding
                    oldest = pending.pop(0)
                    await store.wait_for_rollouts(rollout_ids=oldest, timeout=args.timeout)
                rollouts = await store.enqueue_many_rollouts([{"input": t} for t in chunk])
                for task, ro in zip(chunk, rollouts):
                    enq.tasks[ro.rollout_id] = task
                    enq.enqueued_at[ro.rollout_id] = ro.start_time
                pending.append([ro.rollout_id for ro in rollouts])
                stack.check()
            done = await store.wait_for_rollouts(rollout_ids=list(enq.tasks), timeout=args.timeout)
            t_done = time.time()
            if len(done) != len(enq.tasks):
                raise RuntimeError(f"only {len(done)} of {len(enq.tasks)} rollouts finished within {args.timeout}s")
        expected_spans = sum(plan(t).spans for t in tasks)
        await wait_sinks_caught_up(log_dir / "processors.health.json", expected_spans, len(tasks))
        runners.stop()
        stack.services[0].stop(timeout=60)  # the processors: ClickHouse is free for this process now
        rss.sample()
        sample, avg_size = await sample_spans(settings, min(expected_spans, 5000))
        raw_n = min(max(expected_spans, 5000), 30000)
        results["raw"] = {"produce_records_per_s": await raw_produce_rate(settings, raw_n, int(avg_size), args.partitions),
                          "produce_records": raw_n, "span_record_bytes": avg_size}  # fmt: skip
    finally:
        stack.stop()
        rss.stop()

    from agl_stream_processors.clickhouse import connect

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        verdict = audit(ch, enq)
        ids = "(" + ",".join(f"'{i}'" for i in enq.tasks) + ")"
        rows = ch.query_rows(
            f"SELECT r.RolloutId, toFloat64(r.StartTime), toFloat64(r.EndTime), t.first_row, t.finished "
            f"FROM (SELECT RolloutId, StartTime, EndTime FROM rollouts FINAL WHERE RolloutId IN {ids}) AS r "
            f"LEFT JOIN (SELECT RolloutId, toFloat64(min(InsertedAt)) AS first_row, toFloat64(min(FinishedAt)) AS finished "
            f"FROM triplets FINAL WHERE RolloutId IN {ids} GROUP BY RolloutId) AS t ON r.RolloutId = t.RolloutId"
        )[1]
        last_span_row = ch.scalar(f"SELECT toFloat64(max(InsertedAt)) FROM spans WHERE RolloutId IN {ids}")
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
    results["rollouts_per_s"] = len(enq.tasks) / (t_done - t0)
    results["spans_per_s"] = verdict.spans / (last_span_row - t0)
    results["duration_s"] = t_done - t0
    results["latency"] = {
        "enqueue_to_succeeded_s": quantiles([r[2] - r[1] for r in succeeded]),
        "enqueue_to_triplet_row_s": quantiles([r[3] - r[1] for r in rows if r[3]]),
        "finish_to_triplet_row_s": quantiles([r[3] - r[4] for r in rows if r[3] and r[4]]),
    }
    results["rss_mb"] = rss.summary()
    results["ratio"] = {
        "spans_vs_raw_produce": results["spans_per_s"] / results["raw"]["produce_records_per_s"],
        "spans_vs_raw_insert": results["spans_per_s"] / results["raw"]["clickhouse_insert_rows_per_s"],
    }
    return results


def print_table(r: dict[str, Any]) -> None:
    lat = r["latency"]
    v = r["verified"]
    rows = [
        ("rollouts/s (target >= 170)", f"{r['rollouts_per_s']:.1f}"),
        ("spans/s end to end (target >= 3,700)", f"{r['spans_per_s']:,.0f}"),
        ("raw aiokafka produce, same-size records", f"{r['raw']['produce_records_per_s']:,.0f} records/s "
         f"({r['raw']['span_record_bytes']:,.0f} B)"),
        ("e2e spans/s vs raw produce (target >= 50 %)", f"{100 * r['ratio']['spans_vs_raw_produce']:.1f} %"),
        ("raw ClickHouse insert_arrow, span rows", f"{r['raw']['clickhouse_insert_rows_per_s']:,.0f} rows/s"),
        ("e2e spans/s vs raw insert", f"{100 * r['ratio']['spans_vs_raw_insert']:.1f} %"),
        ("enqueue -> succeeded p50 / p99", f"{lat['enqueue_to_succeeded_s']['p50']:.2f} / {lat['enqueue_to_succeeded_s']['p99']:.2f} s"),
        ("enqueue -> triplet row p50 / p99", f"{lat['enqueue_to_triplet_row_s']['p50']:.2f} / {lat['enqueue_to_triplet_row_s']['p99']:.2f} s"),
        ("finish -> triplet row p50 / p99 (target p99 <= 1 s)", f"{lat['finish_to_triplet_row_s']['p50']:.2f} / {lat['finish_to_triplet_row_s']['p99']:.2f} s"),
        ("peak RSS runner max / median (target <= 150 MB)", f"{r['rss_mb']['runner_max']:.0f} / {r['rss_mb']['runner_median']:.0f} MB"),
        ("peak RSS processors / driver", f"{r['rss_mb']['processors_max']:.0f} / {r['rss_mb']['driver']:.0f} MB"),
        ("verified from ClickHouse", f"{v['succeeded']}/{v['enqueued']} succeeded, {v['spans']} spans, {v['triplets']} triplets, "
         f"duplicates {v['duplicates']}, lost {v['lost']}"),
    ]  # fmt: skip
    p = r["params"]
    print(f"\nrollout workload: {p['rollouts']} rollouts, batches of {p['batch']}, {p['runners']} runner processes x "
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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the rollouts")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the stack's data here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
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
    print_table(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if not results["verified"]["ok"]:
        print("VERIFICATION FAILED:", json.dumps(results["verified"], default=str)[:3000], file=sys.stderr)
        sys.exit(1)
    return results


if __name__ == "__main__":
    main()
