"""Upstream's own store benchmark file, run unchanged against upstream's store and against agl-stream's front door.

Upstream's ``tests/benchmark/benchmark_store.py`` (with its ``utils.py``; agentlightning at tag v0.3.0) is kept
outside this repository: pass its path. Its folder is copied as a package (the file imports ``.utils``) to a
temporary folder and run with the upstream side venv's python, ``python -m benchmark.benchmark_store --store-url
URL ...``, exactly as upstream's CI runs it. The file verifies every rollout itself (its spans hold the task, its
final reward is in [1, 2]) and exits non-zero on the first that fails, so a run that exits 0 verified them all.

Each side is started fresh per run and the runs alternate (agl-stream, upstream, agl-stream, ...):
- **agl-stream**: the local stack (the local default broker, ``agl-stream processors`` with the embedded
  ClickHouse and its SQL door) and ``agl-stream ingest store``, as the porting guide says;
- **upstream**: ``agl store`` from the side venv, one process.

Reported per run: rollouts/s over the benchmark's wall time, server CPU ms per rollout (whole process trees:
broker, processors and front door; or upstream's store), broken down per process, peak server RSS, the client's
CPU, and the front door's per-route answer times. Two workloads (``--workload``): ``small`` (512 tasks, batch 128,
8 runners, at most 6 rounds, 0.1 s sleeps) and ``production`` (upstream CI's "minimal production scale": 4,096
tasks, batch 256, 32 runners, 6 rounds, 0.5 s sleeps).

    python tests/benchmarks/bench_upstream_file.py --benchmark /path/to/agent-lightning/tests/benchmark/benchmark_store.py \\
        --workload small --runs 3 --json docs/bench-report/upstream-file-small.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agl_stream.config import Settings  # noqa: E402
from tests.benchmarks.bench_upstream_store import run_alternating  # noqa: E402
from tests.benchmarks.process_sampler import ProcessSampler  # noqa: E402
from tests.upstream_venv import UPSTREAM_ENV, UPSTREAM_VENV  # noqa: E402

console = Console()

#: name -> the benchmark file's arguments (batch mode)
WORKLOADS: dict[str, dict[str, Any]] = {
    "small": {"total_tasks": 512, "batch_size": 128, "n_runners": 8, "max_rounds": 6, "sleep_seconds": 0.1},
    "production": {"total_tasks": 4096, "batch_size": 256, "n_runners": 32, "max_rounds": 6, "sleep_seconds": 0.5},
    "smoke": {"total_tasks": 16, "batch_size": 8, "n_runners": 2, "max_rounds": 2, "sleep_seconds": 0.01},  # the driver itself
}
SERVER_ROLES = ("broker", "processors", "front_door", "upstream_store")


def benchmark_package(benchmark: Path, into: Path) -> Path:
    """Copy the benchmark file's folder, unchanged, as the (namespace) package ``benchmark`` under ``into``."""
    shutil.copytree(benchmark.parent, into / "benchmark", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def benchmark_command(module: str, url: str, workload: dict[str, Any]) -> list[str]:
    cmd = [str(UPSTREAM_VENV / "bin" / "python"), "-m", f"benchmark.{module}", "--store-url", url, "--mode", "batch"]
    for key, value in workload.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return cmd


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the benchmark's process group (its runners, after it failed or was stopped)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def file_workload(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The workload callable the two sides run: upstream's file against ``url``."""

    def run(url: str, _args: argparse.Namespace, sampler: ProcessSampler, log: Path) -> dict[str, Any]:
        workload = WORKLOADS[args.workload]
        with tempfile.TemporaryDirectory(prefix="agl-upstream-benchmark-") as tmp:
            cwd = benchmark_package(args.benchmark, Path(tmp))
            cmd = benchmark_command(args.benchmark.stem, url, workload)
            # the file aborts itself after (GITHUB_ACTIONS_TIMEOUT_MINUTES - 10) minutes: give it the driver's timeout
            env = {**os.environ, **UPSTREAM_ENV, "GITHUB_ACTIONS_TIMEOUT_MINUTES": str(int(args.timeout // 60) + 11)}
            started = time.monotonic()
            with log.open("wb") as out:
                # its own process group: the file starts its runners as child processes, which must not outlive it
                proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                sampler.watch("client", proc.pid)
                try:
                    code = proc.wait(timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"upstream's benchmark did not finish within {args.timeout:.0f}s; see {log}") from None
                finally:
                    _stop_group(proc)
            seconds = time.monotonic() - started
        if code != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"upstream's benchmark failed (exit {code}); see {log}:\n{tail}")
        tasks = int(workload["total_tasks"])
        return {"verified": tasks, "seconds": round(seconds, 2), "rollouts_per_s": round(tasks / seconds, 3),
                "server_peak_rss_mb": round(sum(mb for key, mb in sampler.peak_rss().items()
                                                if key.split("/", 1)[0] in SERVER_ROLES), 1)}  # fmt: skip

    return run


def spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    per_process: dict[str, list[float]] = {}
    for r in runs:
        for key, seconds in r["cpu_s"]["by_process"].items():
            per_process.setdefault(key, []).append(1000 * seconds / r["verified"])
    idle: dict[str, list[float]] = {}
    for r in runs:
        for key, share in (r.get("idle_cpu_s_per_s") or {}).items():
            idle.setdefault(key, []).append(share)
    return {
        **({"idle_cpu_s_per_s_by_process": {key: round(statistics.median(v), 4) for key, v in idle.items()}} if idle else {}),
        "runs": len(runs),
        "rollouts_per_s": spread([r["rollouts_per_s"] for r in runs]),
        "server_cpu_ms_per_rollout": spread([1000 * r["cpu_s"]["server"] / r["verified"] for r in runs]),
        "client_cpu_ms_per_rollout": spread([1000 * r["cpu_s"]["client"] / r["verified"] for r in runs]),
        "server_peak_rss_mb": spread([r["server_peak_rss_mb"] for r in runs]),
        "cpu_ms_per_rollout_by_process": {key: round(statistics.median(v), 2) for key, v in
                                          sorted(per_process.items(), key=lambda kv: -statistics.median(kv[1]))},  # fmt: skip
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", type=Path, required=True, help="upstream's tests/benchmark/benchmark_store.py")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="small")
    parser.add_argument("--runs", type=int, default=3, help="runs per side, alternating")
    parser.add_argument("--partitions", type=int, default=4, help="agl-stream's partitions (the local default: 4)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run of the benchmark may take")
    parser.add_argument("--only", choices=("agl-stream", "upstream"), default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the raw runs and the summary here")
    parser.add_argument("--keep", type=Path, default=None, help="keep each run's logs and data under this folder")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy every server process for each run, stacks and summaries under this folder "
                             "(profiled runs cost py-spy's CPU too: measure without it)")
    parser.add_argument("--broker-full-jit", action="store_true",
                        help="the local Apache Kafka's JVM compiles with C2 too, as before issue 36 (default: C1 only)")
    parser.add_argument("--stdlib-io", action="store_true",
                        help="agl-stream's services on asyncio's loop and h11, as before issue 36 (default: uvloop and "
                             "httptools where installed)")
    parser.add_argument("--front-door-workers", type=int, default=1,
                        help="agl-stream's front-door replicas behind the one address (uvicorn workers)")
    parser.add_argument("--setting", action="append", default=[], metavar="AGL_NAME=VALUE",
                        help="an agl-stream setting for its side's services, as its environment variable (repeatable; "
                             "the driver otherwise starts them from an empty environment)")
    parser.add_argument("--idle", type=float, default=0,
                        help="first measure each side's server CPU for this many seconds with nothing asked of it")
    args = parser.parse_args(argv)
    if not args.benchmark.is_file():
        parser.error(f"--benchmark {args.benchmark}: no such file")
    for setting in args.setting:
        if not re.fullmatch(r"AGL_[A-Z0-9_]+=.*", setting):
            parser.error(f"--setting {setting!r}: expected AGL_NAME=VALUE")
        if setting.split("=", 1)[0][len("AGL_"):].lower() not in Settings.model_fields:
            parser.error(f"--setting {setting!r}: agl-stream has no such setting")
    if not (UPSTREAM_VENV / "bin" / "python").exists():
        parser.error(f"no upstream side venv at {UPSTREAM_VENV}: run `make upstream`")
    console.print(f"upstream's {args.benchmark.name}, workload {args.workload}: {WORKLOADS[args.workload]}")
    results = run_alternating(args, file_workload(args), lambda r: (
        f"  {r['rollouts_per_s']} rollouts/s, server CPU {1000 * r['cpu_s']['server'] / r['verified']:.1f} ms/rollout, "
        f"server RSS {r['server_peak_rss_mb']:.0f} MB"))  # fmt: skip
    report = {"benchmark": str(args.benchmark), "workload": {"name": args.workload, **WORKLOADS[args.workload]},
              "partitions": args.partitions, "front_door_workers": args.front_door_workers,
              "broker_full_jit": args.broker_full_jit, "stdlib_io": args.stdlib_io, "settings": args.setting,
              "cpu_count": os.cpu_count(), "runs": results,
              "summary": {name: summarize(runs) for name, runs in results.items() if runs}}  # fmt: skip
    table = Table(title=f"upstream's benchmark_store.py, unchanged ({args.workload})")
    for col in ("behind the URL", "runs", "rollouts/s", "server CPU ms/rollout", "server RSS MB", "client CPU ms/rollout"):
        table.add_column(col)
    for name, s in report["summary"].items():
        fmt = lambda d: f"{d['median']} ({d['min']}-{d['max']})"  # noqa: E731
        table.add_row(name, str(s["runs"]), fmt(s["rollouts_per_s"]), fmt(s["server_cpu_ms_per_rollout"]),
                      fmt(s["server_peak_rss_mb"]), fmt(s["client_cpu_ms_per_rollout"]))  # fmt: skip
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
