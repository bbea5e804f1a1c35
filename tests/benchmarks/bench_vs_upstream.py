"""Server CPU per rollout, side by side: agl-stream on the default workload and upstream's store on its own.

Runs alternate in one session on one machine: ``bench_rollouts.py`` (the local stack: the local broker,
Apache Kafka where Java runs, else Tansu; processors with the embedded ClickHouse; every rollout
verified from ClickHouse), then upstream
agentlightning 0.3.0's ``agl store`` driven by upstream's own ``Trainer``, client and runner processes
on upstream's store-benchmark workload (``bench_upstream_store.run_upstream``, side venv of ``make
upstream``; every rollout verified by the workload through ``query_spans``). Same rollouts, batch,
runner count and agent sleep. Server CPU is whole-process CPU from /proc over the run: broker (the JVM on Kafka) +
the topic trimmer + processors apps (embedded engine included) for agl-stream, the store process for upstream.

Run: ``python tests/benchmarks/bench_vs_upstream.py [--runs 3] [--json docs/bench-report/vs_upstream.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks import bench_rollouts  # noqa: E402
from tests.benchmarks.bench_upstream_store import run_upstream  # noqa: E402
from tests.upstream_venv import UPSTREAM_VENV  # noqa: E402


def spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.01)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (UPSTREAM_VENV / "bin" / "python").exists():
        raise SystemExit(f"no upstream side venv at {UPSTREAM_VENV}: run `make upstream`")
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for i in range(args.runs):
        print(f"\n=== run {i + 1}/{args.runs}: agl-stream (bench_rollouts) ===", flush=True)
        r = bench_rollouts.main(["--rollouts", str(args.rollouts), "--batch", str(args.batch), "--runners", str(args.runners),
                                 "--sleep", str(args.sleep), "--partitions", str(args.partitions)])  # fmt: skip
        ours.append({"broker": r.get("broker"), "rollouts_per_s": r["rollouts_per_s"], "verified": r["verified"]["ok"],
                     "server_cpu_ms_per_rollout": r["cpu_ms_per_rollout"]["server_total"],
                     "cpu_ms_per_rollout": r["cpu_ms_per_rollout"]})  # fmt: skip
        print(f"\n=== run {i + 1}/{args.runs}: upstream agl store ===", flush=True)
        with tempfile.TemporaryDirectory(prefix="agl-vs-upstream-") as tmp:
            u = run_upstream(args, Path(tmp))
        theirs.append({"rollouts_per_s": u["rollouts_per_s"], "verified": u["verified"] == args.rollouts,
                       "server_cpu_ms_per_rollout": 1000 * u["cpu_s"]["server"] / max(1, u["verified"])})  # fmt: skip
        print(f"  upstream: {theirs[-1]}", flush=True)
    summary = {
        name: {"rollouts_per_s": spread([r["rollouts_per_s"] for r in runs]),
               "server_cpu_ms_per_rollout": spread([r["server_cpu_ms_per_rollout"] for r in runs]),
               "all_verified": all(r["verified"] for r in runs)}
        for name, runs in (("agl-stream", ours), ("upstream", theirs))
    }  # fmt: skip
    ratio = summary["agl-stream"]["server_cpu_ms_per_rollout"]["median"] / summary["upstream"]["server_cpu_ms_per_rollout"]["median"]
    report = {"workload": {k: getattr(args, k) for k in ("rollouts", "batch", "runners", "sleep", "partitions")},
              "cpu_count": os.cpu_count(), "runs": {"agl-stream": ours, "upstream": theirs}, "summary": summary,
              "server_cpu_ratio_of_medians": round(ratio, 3)}  # fmt: skip
    print("\nserver CPU per rollout, interleaved runs (median, min-max):")
    for name, s in summary.items():
        c, t = s["server_cpu_ms_per_rollout"], s["rollouts_per_s"]
        print(f"  {name:<11} {c['median']} ms ({c['min']}-{c['max']}), {t['median']} rollouts/s ({t['min']}-{t['max']}), "
              f"all verified: {s['all_verified']}")  # fmt: skip
    print(f"  agl-stream / upstream: {ratio:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
