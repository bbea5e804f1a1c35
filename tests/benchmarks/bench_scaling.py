"""Scaling runs: the rollout workload at 1, 2, 4, 8, 16 runner processes and 1, 2, 4 partitions.

One local stack (broker, topics, processors with the embedded ClickHouse) per partition count; in
it, for each runner count, ``agl-stream runner --n-runners R`` is started, ``--rollouts`` rollouts
(default 96 per cell, so the 15-cell grid fits a few minutes on a 2-core machine) are enqueued in
batches of ``--batch`` and waited for, and the runners are stopped again. A cell's throughput is
rollouts (and their planned spans) over first enqueue -> the client saw the last rollout
terminal; runner start-up is outside the window. After the last cell of a stack the processors
are stopped and every rollout of the stack is audited from ClickHouse (succeeded, spans and
triplets exactly once: :func:`tests.faults.harness.audit`).

Tasks are partitioned by rollout id and runners are one consumer group, so at most ``partitions``
runner processes receive tasks; the others idle (the table shows the plateau).

Writes ``--json`` (and, next to it, ``.md`` and ``.png``; default ``reports/scaling.*``).
Run: ``python tests/benchmarks/bench_scaling.py [--runners 1,2,4,8,16] [--partitions 1,2,4]
[--rollouts 96] [--concurrency 8] [--sleep 0.01] [--json reports/scaling.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agl_stream.client import StoreClient  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.execution.local_stack import LocalStack  # noqa: E402
from tests.benchmarks.bench_rollouts import wait_runners_started, wait_sinks_caught_up  # noqa: E402
from tests.benchmarks.workload_agent import ADAPTER_SPEC, make_tasks, plan  # noqa: E402
from tests.faults.audit import Enqueued, audit  # noqa: E402
from tests.faults.harness import AGENT  # noqa: E402


async def one_stack(args: argparse.Namespace, partitions: int, data_dir: Path) -> list[dict[str, Any]]:
    settings = Settings.from_env(env={}, data_dir=data_dir, partitions=partitions, kafka_session_timeout_ms=6000)
    log_dir = data_dir / "logs"
    stack = LocalStack(settings, processor_args=["--adapter", ADAPTER_SPEC], log_dir=log_dir)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cells: list[dict[str, Any]] = []
    enq = Enqueued()
    total_spans = 0
    try:
        settings = await stack.start()
        async with StoreClient(settings) as store:
            for n_runners in args.runners:
                tasks = make_tasks(args.rollouts, seed=1000 * partitions + n_runners, sleep=args.sleep,
                                   prefix=f"p{partitions}-r{n_runners}")  # fmt: skip
                spans = sum(plan(t).spans for t in tasks)
                total_spans += spans
                log = log_dir / "runners.log"
                offset = log.stat().st_size if log.exists() else 0  # the runner services of all cells share one log
                runners = stack.start_runners(AGENT, n_runners, concurrency=args.concurrency, env=env)
                await wait_runners_started(runners, n_runners, timeout=300, log_offset=offset)
                await asyncio.sleep(1.0)
                ids: list[str] = []
                t0 = time.time()
                for start in range(0, len(tasks), args.batch):
                    chunk = tasks[start : start + args.batch]
                    rollouts = await store.enqueue_many_rollouts([{"input": t} for t in chunk])
                    for task, ro in zip(chunk, rollouts):
                        enq.tasks[ro.rollout_id] = task
                        ids.append(ro.rollout_id)
                done = await store.wait_for_rollouts(rollout_ids=ids, timeout=args.timeout)
                elapsed = time.time() - t0
                if len(done) != len(ids):
                    raise RuntimeError(f"cell p={partitions} r={n_runners}: {len(done)}/{len(ids)} finished")
                runners.stop()
                stack.services.remove(runners)
                cell = {"partitions": partitions, "runners": n_runners, "concurrency": args.concurrency,
                        "rollouts": len(ids), "seconds": elapsed, "rollouts_per_s": len(ids) / elapsed,
                        "spans_per_s": spans / elapsed}  # fmt: skip
                print(f"  partitions={partitions} runners={n_runners:>2}: {cell['rollouts_per_s']:6.1f} rollouts/s "
                      f"{cell['spans_per_s']:8,.0f} spans/s", flush=True)  # fmt: skip
                cells.append(cell)
        await wait_sinks_caught_up(log_dir / "processors.health.json", total_spans, len(enq.tasks))
        stack.service("processors").stop(timeout=60)  # type: ignore[union-attr]
    finally:
        stack.stop()
    verdict = audit(settings.effective_clickhouse_dsn, enq)
    ok = verdict.succeeded == verdict.enqueued and not verdict.duplicates and not verdict.lost and not verdict.problems
    for cell in cells:
        cell["verified"] = ok
    print(f"  partitions={partitions}: " + verdict.line("audit"), flush=True)
    return cells


def write_reports(cells: list[dict[str, Any]], json_path: Path, args: argparse.Namespace) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"params": {"rollouts_per_cell": args.rollouts, "batch": args.batch, "concurrency": args.concurrency,
                      "sleep": args.sleep, "cores": os.cpu_count()}, "cells": cells}  # fmt: skip
    json_path.write_text(json.dumps(doc, indent=2))
    parts = sorted({c["partitions"] for c in cells})
    runners = sorted({c["runners"] for c in cells})
    by = {(c["partitions"], c["runners"]): c for c in cells}
    lines = [
        f"# Scaling: rollout workload ({args.rollouts} rollouts per cell, concurrency {args.concurrency} per runner, "
        f"sleep {args.sleep} s, {os.cpu_count()} cores)",
        "",
        "rollouts/s (spans/s) by runner processes (columns) and partitions (rows)",
        "",
        "| partitions | " + " | ".join(f"{r} runners" for r in runners) + " |",
        "|---|" + "---|" * len(runners),
    ]
    for p in parts:
        row = [f"{by[(p, r)]['rollouts_per_s']:.1f} ({by[(p, r)]['spans_per_s']:,.0f})" if (p, r) in by else "-" for r in runners]
        lines.append(f"| {p} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append("Every cell verified from ClickHouse: " + str(all(c.get("verified") for c in cells)))
    json_path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for p in parts:
            xs = [r for r in runners if (p, r) in by]
            ax.plot(xs, [by[(p, r)]["rollouts_per_s"] for r in xs], marker="o", label=f"{p} partition(s)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(runners, [str(r) for r in runners])
        ax.set_xlabel("runner processes")
        ax.set_ylabel("rollouts/s")
        ax.set_title(f"rollout workload on {os.cpu_count()} cores")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(json_path.with_suffix(".png"), dpi=100)
    except Exception as exc:  # the table is the result; the plot is a convenience
        print(f"(no plot: {exc!r})")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runners", type=ints, default=[1, 2, 4, 8, 16])
    parser.add_argument("--partitions", type=ints, default=[1, 2, 4])
    parser.add_argument("--rollouts", type=int, default=96, help="rollouts per cell")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.01)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "scaling.json")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    cells: list[dict[str, Any]] = []
    for partitions in args.partitions:
        with tempfile.TemporaryDirectory(prefix=f"agl-scaling-p{partitions}-") as tmp:
            cells.extend(asyncio.run(one_stack(args, partitions, Path(tmp))))
    write_reports(cells, args.json, args)
    if not all(c.get("verified") for c in cells):
        sys.exit(1)


if __name__ == "__main__":
    main()
