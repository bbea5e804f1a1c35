"""Benchmark: the embedded engine's memory as the sinks' work grows (no Kafka, no sink loop).

The sinks' process is mostly the embedded ClickHouse engine (docs/performance.md, "Memory in a long
run"). This drives that engine the way the sinks do, in one process, so which engine setting moves
what shows in a few minutes instead of a full-stack run: it inserts the rollout workload's rows
(``workload_agent``: ~21 spans of ~4 KB of attributes per rollout, its triplets, three rollout
snapshots and two attempt events) into the real, migrated schema, 48 rollouts (~1,000 spans, the
span sink's batch) at a time, one insert per table per batch (rollouts in three). Rows come from a
pool built once, with fresh rollout ids per batch, so the script's own CPU stays small.

Every ``--sample-every`` rollouts it records the process's RSS (anonymous and file-backed) and CPU,
the engine's tracked memory (``system.metrics`` ``MemoryTracking``) and the peaks of both since the
last sample together with the merge that held the most memory (a thread polls every 0.2 s on its own
connection), the caches' bytes, the active parts with the bytes their primary keys and marks hold in
memory, and jemalloc's allocated/resident/retained (``system.jemalloc_stats``).

Run: ``python tests/benchmarks/bench_engine_memory.py [--rollouts 20000] [--rate 100] [--read]
[--setting name=value ...] [--table-setting name=value ...] [--no-defaults] [--json out.json]``.
``--setting`` adds an engine setting (server or session; ``config-file=PATH`` works too) on top of
the defaults the sinks use (:mod:`agl_stream_processors.clickhouse.engine`), ``--no-defaults`` starts
from ClickHouse's own, ``--table-setting`` alters the sinks' tables, ``--read`` reads one earlier
rollout per batch (what fills the caches). The allocator environment is the sinks' own
(``supervisor.SINKS_ENV``) unless set. One engine per process, so every run is a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agl_stream_processors.supervisor import SINKS_ENV  # noqa: E402

for _name, _value in SINKS_ENV.items():  # before chdb (and its jemalloc) is loaded, as the supervisor's child has it
    os.environ.setdefault(_name, _value)

import pyarrow as pa  # noqa: E402

from agl_stream_processors.clickhouse import ClickHouse, connect, migrate  # noqa: E402
from agl_stream_processors.clickhouse.columns import ColumnBatch  # noqa: E402
from agl_stream_processors.clickhouse.engine import engine_settings  # noqa: E402
from agl_stream_processors.sinks.specs import SINKS  # noqa: E402
from tests.benchmarks.workload_agent import make_tasks, plan  # noqa: E402
from tests.processors.clickhouse.store import (  # noqa: E402
    make_attempt_events,
    make_snapshot,
    make_span,
    make_trajectory,
)

BATCH_ROLLOUTS = 48  # ~1,000 spans: the span sink's batch_size
POOL_ROLLOUTS = 240
CACHES = ("MarkCacheBytes", "IndexMarkCacheBytes", "PrimaryIndexCacheBytes", "UncompressedCacheBytes",
          "IndexUncompressedCacheBytes", "QueryCacheBytes", "QueryConditionCacheBytes", "CompiledExpressionCacheBytes",
          "MMapCacheCells")  # fmt: skip
MB = 1024 * 1024


def rid(n: int) -> str:
    return f"ro-{n:012x}"


def pool_tables() -> dict[str, tuple[pa.Table, list[int]]]:
    """Per table: rows of POOL_ROLLOUTS workload rollouts, and each row's pool rollout index."""
    per_table: dict[str, list[tuple[int, Any]]] = {"spans": [], "triplets": [], "rollouts": [], "attempts": []}
    now = time.time()
    for i, task in enumerate(make_tasks(POOL_ROLLOUTS, seed=1)):
        p, r = plan(task), rid(i)
        seq = 0

        def span(attrs: dict[str, Any], name: str) -> None:
            nonlocal seq
            seq += 1
            value = make_span(r, sequence_id=seq, name=name, attributes=attrs, start_time=now, end_time=now + 0.01)
            per_table["spans"].append((i, value))

        for k, rnd in enumerate(p.rounds):
            span({"workload.round": k}, "workload.round")
            span(rnd.attributes[0], "workload.llm")
            span(rnd.attributes[1], "workload.tool")
            if rnd.reward is not None:
                span({"agentlightning.reward.0.value": rnd.reward}, "agentlightning.annotation")
        span({}, "workload.final")
        span({"agentlightning.reward.0.value": p.final_reward}, "agentlightning.annotation")
        per_table["triplets"].append((i, make_trajectory(r, n=len(p.rounds), reward=p.final_reward)))
        for k, status in enumerate(("queuing", "running", "succeeded")):
            per_table["rollouts"].append((i, make_snapshot(r, status, updated_at=now + k)))
        per_table["attempts"] += [(i, e) for e in make_attempt_events(r, t0=now)]
    out = {}
    for name, values in per_table.items():
        spec = SINKS[name]
        batch, owners = ColumnBatch(spec.schema), []
        for owner, value in values:
            rows = spec.to_rows(value, int(now * 1000))
            batch.rows.extend(rows)
            owners += [owner] * len(rows)
        out[spec.table] = (batch.to_arrow(), owners)
    return out


def batch_of(table: pa.Table, owners: list[int], first_pool: int, first_id: int) -> pa.Table:
    """The pool rows of BATCH_ROLLOUTS rollouts from ``first_pool`` on, renamed to fresh rollout ids."""
    take = [k for k, o in enumerate(owners) if first_pool <= o < first_pool + BATCH_ROLLOUTS]
    part = table.take(pa.array(take))
    ids = pa.array([rid(first_id + owners[k] - first_pool) for k in take])
    return part.set_column(part.schema.get_field_index("RolloutId"), "RolloutId", ids)


def proc_status() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


class Sampler(threading.Thread):
    """Polls RSS, MemoryTracking and merges every 0.2 s on its own chdb connection; ``take()``: peaks since the last."""

    def __init__(self, engine_dir: str) -> None:
        super().__init__(daemon=True)
        import chdb

        self.conn = chdb.connect(engine_dir)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.peak_rss = self.peak_tracked = 0.0
        self.merge: dict[str, Any] = {}  # the merge with the most memory seen since the last take

    def query(self, sql: str) -> list[list[str]]:
        return [line.split("\t") for line in self.conn.query(sql, "TSV").data().splitlines()]

    def run(self) -> None:
        while not self.stop.wait(0.2):
            rss = proc_status()["VmRSS"]
            tracked = float(self.query("SELECT value FROM system.metrics WHERE metric = 'MemoryTracking'")[0][0]) / MB
            merges = self.query(
                "SELECT table, num_parts, total_size_bytes_compressed, rows_read, memory_usage, merge_algorithm "
                "FROM system.merges ORDER BY memory_usage DESC LIMIT 1"
            )
            with self.lock:
                self.peak_rss, self.peak_tracked = max(self.peak_rss, rss), max(self.peak_tracked, tracked)
                if merges and int(merges[0][4]) / MB > self.merge.get("memory_mb", -1):
                    table, parts, size, rows, memory, algorithm = merges[0]
                    self.merge = {"table": table, "parts": int(parts), "compressed_mb": round(int(size) / MB, 1),
                                  "rows_read": int(rows), "memory_mb": round(int(memory) / MB, 1),
                                  "algorithm": algorithm}  # fmt: skip

    def take(self) -> tuple[float, float, dict[str, Any]]:
        with self.lock:
            peaks = (self.peak_rss, self.peak_tracked, self.merge)
            self.peak_rss = self.peak_tracked = 0.0
            self.merge = {}
        return peaks


def jemalloc(ch: ClickHouse) -> dict[str, float]:
    text = ch.scalar("SELECT stats FROM system.jemalloc_stats") or ""
    pattern = r"^Allocated: (\d+), active: (\d+), metadata: (\d+).*resident: (\d+), mapped: (\d+), retained: (\d+)"
    found = re.search(pattern, text, re.M)
    keys = ("allocated", "active", "metadata", "resident", "mapped", "retained")
    return {k: round(int(v) / MB, 1) for k, v in zip(keys, found.groups())} if found else {}


def snapshot(ch: ClickHouse, sampler: Sampler, rollouts: int, t0: float) -> dict[str, Any]:
    _cols, metrics = ch.query_rows(
        "SELECT metric, value FROM system.metrics WHERE metric IN {m:Array(String)}",
        {"m": ["MemoryTracking", "MergesMutationsMemoryTracking", "Merge", *CACHES]},
    )
    m = dict(metrics)
    _cols, parts = ch.query_rows(
        "SELECT table, countIf(active), countIf(NOT active), sumIf(rows, active), "
        "sumIf(primary_key_bytes_in_memory_allocated, active), sumIf(marks_bytes, active), "
        "sumIf(index_granularity_bytes_in_memory_allocated, active), sumIf(bytes_on_disk, active) "
        "FROM system.parts WHERE database = currentDatabase() GROUP BY table"
    )
    peak_rss, peak_tracked, merge = sampler.take()
    return {
        "rollouts": rollouts,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(sum(os.times()[:2]), 1),  # user + system of this process: the engine's threads and the script's
        "rss_mb": {k: round(v, 1) for k, v in proc_status().items()},
        "peak_rss_mb": round(peak_rss, 1),
        "tracked_mb": round(m.get("MemoryTracking", 0) / MB, 1),
        "peak_tracked_mb": round(peak_tracked, 1),
        "merges_tracked_mb": round(m.get("MergesMutationsMemoryTracking", 0) / MB, 1),
        "merges_running": m.get("Merge", 0),
        "largest_merge": merge,
        "caches_mb": {c: (m.get(c, 0) if c.endswith("Cells") else round(m.get(c, 0) / MB, 2)) for c in CACHES},
        "parts": {t: {"active": a, "inactive": i, "rows": n, "pk_mb": round(pk / MB, 3), "marks_mb": round(mk / MB, 3),
                      "granularity_mb": round(g / MB, 3), "disk_mb": round(d / MB, 1)}
                  for t, a, i, n, pk, mk, g, d in parts},  # fmt: skip
        "jemalloc_mb": jemalloc(ch),
    }


def progress(s: dict[str, Any]) -> str:
    parts = s["parts"].values()
    return (f"{s['rollouts']:6d} rollouts {s['elapsed_s']:6.1f}s | rss {s['rss_mb']['VmRSS']:6.1f} "
            f"(anon {s['rss_mb']['RssAnon']:6.1f}) peak {s['peak_rss_mb']:6.1f} | tracked {s['tracked_mb']:6.1f} "
            f"peak {s['peak_tracked_mb']:6.1f} | jemalloc resident {s['jemalloc_mb'].get('resident', 0):6.1f} | "
            f"parts {sum(p['active'] for p in parts):4d} pk {sum(p['pk_mb'] for p in parts):.2f} MB | "
            f"mark cache {s['caches_mb']['MarkCacheBytes']} MB | largest merge {s['largest_merge']}")  # fmt: skip


def parse_settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--setting {pair!r}: expected name=value")
        out[name.strip()] = value.strip()
    return out


def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = {} if args.no_defaults else engine_settings()
    settings.update(parse_settings(args.setting))
    pools = pool_tables()
    engine_dir = tempfile.mkdtemp(prefix="agl-engine-mem-")
    ch = connect(f"chdb://{engine_dir}", engine_settings=settings)
    migrate(ch)
    table_settings = parse_settings(args.table_setting)
    if table_settings:
        assignments = ", ".join(f"{k} = {v}" for k, v in table_settings.items())
        for table in ("spans", "triplets", "rollouts", "attempts"):
            ch.command(f"ALTER TABLE {table} MODIFY SETTING {assignments}")
    sampler = Sampler(engine_dir)
    sampler.start()
    samples = [snapshot(ch, sampler, 0, time.perf_counter())]
    t0 = time.perf_counter()
    errors = 0
    done = 0
    reads = random.Random(0)
    while done < args.rollouts:
        first_pool = (done // BATCH_ROLLOUTS * BATCH_ROLLOUTS) % POOL_ROLLOUTS
        for table, (pool, owners) in pools.items():
            data = batch_of(pool, owners, first_pool, done)
            pieces = 3 if table == "rollouts" else 1
            step = -(-data.num_rows // pieces)
            for start in range(0, data.num_rows, step):
                try:
                    ch.insert_arrow(table, data.slice(start, step))
                except Exception as exc:  # a limit hit: count it and go on (the sink would retry)
                    errors += 1
                    print(f"insert into {table} failed: {str(exc)[:200]}", file=sys.stderr)
        done += BATCH_ROLLOUTS
        if args.read:  # what a reader does meanwhile: one earlier rollout's spans and triplets (fills the caches)
            old = rid(reads.randrange(done))
            ch.query_rows("SELECT count() FROM spans WHERE RolloutId = {r:String}", {"r": old})
            ch.query_rows("SELECT count() FROM triplets FINAL WHERE RolloutId = {r:String}", {"r": old})
        if args.rate:
            time.sleep(max(0.0, t0 + done / args.rate - time.perf_counter()))
        if done // args.sample_every != (done - BATCH_ROLLOUTS) // args.sample_every:
            samples.append(snapshot(ch, sampler, done, t0))
            print(progress(samples[-1]), flush=True)
    time.sleep(args.settle)
    samples.append(snapshot(ch, sampler, done, t0) | {"settled_s": args.settle})
    sampler.stop.set()
    sampler.join()
    effective = dict(ch.query_rows(
        "SELECT name, value FROM system.server_settings WHERE name IN {n:Array(String)} UNION ALL "
        "SELECT name, value FROM system.settings WHERE name IN {n:Array(String)}", {"n": list(settings)},
    )[1]) if settings else {}  # fmt: skip
    ch.close()
    shutil.rmtree(engine_dir, ignore_errors=True)  # up to ~1.5 GB per run
    return {"engine_settings": settings, "table_settings": table_settings, "read": args.read, "effective": effective,
            "rate": args.rate, "insert_errors": errors, "je_malloc_conf": os.environ.get("JE_MALLOC_CONF"),
            "samples": samples}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=0.0, help="rollouts/s (0: as fast as the engine takes them)")
    parser.add_argument("--sample-every", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait before the last sample")
    parser.add_argument("--setting", action="append", default=[], help="name=value: an engine setting (repeatable)")
    parser.add_argument("--table-setting", action="append", default=[],
                        help="name=value: a MergeTree setting for the sinks' tables (ALTER TABLE ... MODIFY SETTING)")
    parser.add_argument("--read", action="store_true", help="read one earlier rollout's spans and triplets per batch")
    parser.add_argument("--no-defaults", action="store_true", help="start from ClickHouse's own settings")
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    result = main(arguments)
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=2))
