"""``make bench``: run every benchmark script, repeat it, and write one report.

Each ``bench_*.py`` in this folder is a standalone script that measures its part next to the raw
broker / ClickHouse rates of the same run and writes its figures as JSON (``--json PATH``). This
driver runs each one ``--repeats`` times, flattens every numeric figure to a dotted name, and
reports the median and the spread (min-max) over repeats, together with the machine, versions and
date, as ``reports/bench.json`` and ``reports/bench.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ON_DEMAND = {"bench_scaling"}  # too long for the 15-minute `make bench`; `make scaling` runs it
# (benchmark, figure, "<=" or ">=", bound, what) - DESIGN.md's targets, checked against the medians
TARGETS: list[tuple[str, str, str, float, str]] = [
    ("bench_rollouts", "cpu_ms_per_rollout.server_total", "<=", 12.0, "server CPU per rollout (broker + processors, ClickHouse included), ms"),
    ("bench_rollouts", "cpu_ms_per_rollout.runners_total", "<=", 25.0, "runner CPU per rollout, ms"),
    ("bench_rollouts", "rollouts_per_s", ">=", 40.0, "rollouts/s, every rollout verified from ClickHouse"),
    ("bench_rollouts", "verified.duplicates", "<=", 0.0, "duplicates found by the audit"),
    ("bench_rollouts", "verified.lost", "<=", 0.0, "rollouts/rows lost according to the audit"),
    ("bench_rollouts", "rss_mb.processors_max", "<=", 350.0, "processors peak RSS, MB (the largest: sinks, embedded ClickHouse included)"),
    ("bench_rollouts", "rss_mb.processors.state-machine", "<=", 350.0, "state machine peak RSS, MB"),
    ("bench_rollouts", "rss_mb.processors.triplets", "<=", 350.0, "triplet processor peak RSS, MB"),
    ("bench_rollouts", "rss_mb.runner_max", "<=", 150.0, "runner process peak RSS, MB"),
    ("bench_rollouts_offered", "latency.finish_to_triplet_row_s.p99", "<=", 1.0, "offered load: finished -> triplet row p99, s"),
    ("bench_rollouts_offered", "latency.finish_to_succeeded_snapshot_s.p99", "<=", 1.0,
     "offered load: finished -> rollout succeeded on agl.rollouts p99, s"),
    ("bench_rollouts_offered", "latency.finish_to_succeeded_row_s.p99", "<=", 1.0,
     "offered load: finished -> rollout succeeded in the rollouts table p99, s"),
    ("bench_runner_export", "agent_thread_us_per_span", "<=", 50.0, "agent thread cost per span, us"),
]
VERSIONS = ("aiokafka", "faust-streaming", "chdb", "clickhouse-connect", "torch", "transformers", "verl", "pydantic")


def machine() -> dict[str, Any]:
    import psutil

    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "versions": versions,
    }


def flatten(doc: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[prefix.rstrip(".")] = float(doc)
    return out


def summarize(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    names = sorted({k for run in runs for k in run})
    table = {}
    for name in names:
        values = [run[name] for run in runs if name in run]
        table[name] = {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
    return table


def run_script(script: Path, out: Path, extra: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(script), "--json", str(out), *extra]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{script.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    doc.setdefault("wall_seconds", elapsed)
    return doc


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# agl-stream benchmark report",
        "",
        f"{m['date']} on {m['host']}: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, Python {m['python']}",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
        "",
        f"Repeats per benchmark: {report['repeats']}. Figures are medians, with min-max over repeats.",
        "",
        *targets_section(report),
    ]
    for bench, result in report["benchmarks"].items():
        lines += [f"## {bench}", ""]
        if "error" in result:
            lines += [f"FAILED: {result['error'][:500]}", ""]
            continue
        lines += ["| figure | median | min | max |", "|---|---:|---:|---:|"]
        for name, s in result["figures"].items():
            lines.append(f"| {name} | {s['median']:.4g} | {s['min']:.4g} | {s['max']:.4g} |")
        lines.append("")
    return "\n".join(lines)


def targets_section(report: dict[str, Any]) -> list[str]:
    """DESIGN.md's targets next to this run's medians (and min-max), met or not."""
    rows = []
    for bench, figure, op, bound, what in TARGETS:
        stats = report["benchmarks"].get(bench, {}).get("figures", {}).get(figure)
        if stats is None:
            continue
        met = stats["median"] <= bound if op == "<=" else stats["median"] >= bound
        rows.append(f"| {what} | {op} {bound:g} | {stats['median']:.4g} ({stats['min']:.4g}-{stats['max']:.4g}) "
                    f"| {'met' if met else '**not met**'} |")  # fmt: skip
    if not rows:
        return []
    return ["## Targets", "", "| target | bound | median (min-max) | |", "|---|---:|---:|---|", *rows, ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=int(os.environ.get("AGL_BENCH_REPEATS", "2")))
    parser.add_argument("--only", nargs="*", help="benchmark names (e.g. bench_sinks) to run; bench_scaling "
                        "(a grid of whole-pipeline runs, minutes each) runs only when named here")
    parser.add_argument("--out", type=Path, default=ROOT / "reports")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per script run")
    args, extra = parser.parse_known_args()

    scripts = sorted(
        p for p in HERE.glob("bench_*.py") if (p.stem in args.only if args.only else p.stem not in ON_DEMAND)
    )
    raw_dir = args.out / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine(), "repeats": args.repeats, "benchmarks": {}}
    failed = 0
    from rich.progress import Progress

    with Progress() as progress:
        task = progress.add_task("benchmarks", total=len(scripts) * args.repeats)
        for script in scripts:
            runs: list[dict[str, float]] = []
            docs: list[dict[str, Any]] = []
            try:
                for i in range(args.repeats):
                    progress.update(task, description=f"{script.stem} ({i + 1}/{args.repeats})")
                    doc = run_script(script, raw_dir / f"{script.stem}.{i}.json", extra, args.timeout)
                    docs.append(doc)
                    runs.append(flatten(doc))
                    progress.advance(task)
                report["benchmarks"][script.stem] = {"figures": summarize(runs), "last_run": docs[-1]}
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                failed += 1
                report["benchmarks"][script.stem] = {"error": str(exc)}
                progress.advance(task, args.repeats - len(runs))
    (args.out / "bench.json").write_text(json.dumps(report, indent=2))
    text = markdown(report)
    (args.out / "bench.md").write_text(text)
    print(text)
    print(f"\nwrote {args.out / 'bench.json'} and {args.out / 'bench.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
