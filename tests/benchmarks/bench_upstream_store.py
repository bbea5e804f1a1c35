"""Benchmark: upstream's own store client and runners against the store front door, and against upstream's store.

An upstream deployment moves to agl-stream by pointing its store URL at ``agl-stream ingest store``.
This measures what that gives, side by side on the same machine in the same session:

* **agl-stream**: the local stack (Tansu broker, ``agl-stream processors`` with the embedded ClickHouse
  and its SQL door) plus ``agl-stream ingest store``;
* **upstream**: ``agl store`` (agentlightning 0.3.0's in-memory ``LightningStoreServer``) from the
  side venv.

Both run the same client, ``upstream_store_workload.py`` with the side venv's python: upstream's
``Trainer`` with ``ClientServerExecutionStrategy(managed_store=False)`` and ``--runners`` upstream
runner processes, in upstream's batch mode (every rollout verified from ``query_spans``). Runs
alternate (agl-stream, upstream, agl-stream, ...). Reported per run: rollouts/s and every rollout
verified (the workload's own figures), and CPU seconds per rollout of the server side (agl-stream:
broker + processors + front door; upstream: the store process) and of the client side (algorithm +
runners), from /proc (psutil).

Run: ``python tests/benchmarks/bench_upstream_store.py [--runs 3] [--rollouts 1024] [--batch 128]
[--runners 8] [--json out.json]`` (needs ``make upstream``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agl_stream.config import Settings  # noqa: E402
from agl_stream.execution.local_stack import LocalStack  # noqa: E402
from agl_stream.service import ServiceProcess, agl_command  # noqa: E402
from tests.benchmarks.process_sampler import ProcessSampler  # noqa: E402
from tests.upstream_venv import UPSTREAM_ENV, UPSTREAM_VENV  # noqa: E402

if TYPE_CHECKING:
    from tests.benchmarks.spy_trees import SpyTrees

WORKLOAD = Path(__file__).with_name("upstream_store_workload.py")
console = Console()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | ServiceProcess, timeout: float = 120.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = proc.poll() is None if isinstance(proc, subprocess.Popen) else proc.alive
        if not alive:
            raise RuntimeError(f"the store at {url} exited during start-up")
        try:
            with urllib.request.urlopen(url + "/v1/agl/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the store at {url} was not healthy within {timeout:.0f}s")


def run_workload(url: str, args: argparse.Namespace, sampler: ProcessSampler, log: Path) -> dict[str, Any]:
    """The upstream client against ``url``; its result plus the client side's CPU."""
    python = UPSTREAM_VENV / "bin" / "python"
    cmd = [str(python), str(WORKLOAD), "--store-url", url, "--total-tasks", str(args.rollouts),
           "--batch-size", str(args.batch), "--n-runners", str(args.runners), "--sleep-seconds", str(args.sleep)]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **UPSTREAM_ENV})
        sampler.watch("client", proc.pid)
        code = proc.wait(timeout=args.timeout)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise RuntimeError(f"the upstream workload failed (exit {code}); see {log}")
    return json.loads(lines[-1])


def route_latency(url: str) -> dict[str, dict[str, float]]:
    """Requests and mean answer time per route of the front door, from its /metrics."""
    import re
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    found: dict[str, dict[str, float]] = {}
    for match in re.finditer(r'^agl_ingest_request_latency_seconds_(sum|count)\{(.*?)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if labels.get("server") == "store":
            found.setdefault(labels["route"], {})[match.group(1)] = float(match.group(3))
    return {route: {"requests": v.get("count", 0.0), "mean_ms": round(1000 * v.get("sum", 0.0) / max(v.get("count", 1.0), 1.0), 2)}
            for route, v in sorted(found.items(), key=lambda kv: -kv[1].get("sum", 0.0))}  # fmt: skip


#: the client that drives a store: (its URL, the arguments, the CPU sampler, a log file) -> its result
Workload = Callable[[str, argparse.Namespace, ProcessSampler, Path], dict[str, Any]]


def span_read_sources(url: str) -> dict[str, float]:
    """The front door's query_spans answers by source (its span feed of recent rollouts, or ClickHouse), from /metrics."""
    import re
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'^agl_store_span_reads_total\{source="([^"]+)"\} (\S+)$', text, re.M)}


def cpu_by_side(sampler: ProcessSampler) -> dict[str, Any]:
    sides: dict[str, Any] = {"server": 0.0, "client": 0.0}
    detail = sampler.cpu_since()
    sides["by_process"] = {key: round(seconds, 2) for key, seconds in sorted(detail.items(), key=lambda kv: -kv[1])}
    for key, seconds in detail.items():
        role = key.split("/", 1)[0]
        if role in ("broker", "processors", "front_door", "upstream_store"):
            sides["server"] += seconds
        elif role == "client":
            sides["client"] += seconds
    return sides


def idle_cpu(args: argparse.Namespace, sampler: ProcessSampler) -> dict[str, float] | None:
    """``--idle SECONDS``: the server's CPU per second of wall time while nothing is asked of it (the fixed cost a
    rollout pays its share of at any throughput), per ``role/name``; measured before the workload."""
    seconds = float(getattr(args, "idle", 0) or 0)
    if seconds <= 0:
        return None
    sampler.mark()
    time.sleep(seconds)
    return {key: round(cpu / seconds, 4) for key, cpu in sorted(sampler.cpu_since().items(), key=lambda kv: -kv[1])}


def _profiler(args: argparse.Namespace, system: str, work: Path) -> "SpyTrees | None":
    """py-spy on the server's processes for the run (``--profile DIR``; profiled runs are not measured runs: py-spy
    takes CPU of its own), the stacks under ``DIR/<system>-<n>/``."""
    folder = getattr(args, "profile", None)
    if folder is None:
        return None
    from tests.benchmarks.spy_trees import SpyTrees

    runs = sorted(folder.glob(f"{system}-*")) if folder.exists() else []
    return SpyTrees(folder / f"{system}-{len(runs) + 1}")


def front_door_flags(args: argparse.Namespace) -> list[str]:
    """``--front-door-workers N``: N replicas behind the one port (uvicorn workers); with more than one, a runner's
    calls may reach several, so span counts are off as docs/store-api.md says."""
    workers = int(getattr(args, "front_door_workers", 1) or 1)
    return [] if workers == 1 else ["--workers", str(workers), "--no-span-counts"]


async def topic_records(bootstrap: str) -> dict[str, int]:
    """Records written to each topic on the broker, internal ones included (``__consumer_offsets``: commits), from
    the partitions' end offsets: the same for compacted topics, whose offsets never go back."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        described = await admin.describe_topics(await admin.list_topics())
        partitions = [TopicPartition(t["topic"], p["partition"]) for t in described for p in t["partitions"]]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
        await admin.close()
    counts: dict[str, int] = {}
    for tp, end in ends.items():
        counts[tp.topic] = counts.get(tp.topic, 0) + end
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


async def run_agl_stream(args: argparse.Namespace, work: Path, workload: Workload = run_workload) -> dict[str, Any]:
    stdlib_io = {"event_loop": "asyncio", "http_parser": "h11"} if getattr(args, "stdlib_io", False) else {}
    chosen = dict(setting.split("=", 1) for setting in getattr(args, "setting", None) or [])  # --setting AGL_X=V
    settings = Settings.from_env(env=chosen, data_dir=work / "agl", partitions=args.partitions,
                                 local_kafka_full_jit=getattr(args, "broker_full_jit", None) or None, **stdlib_io)  # fmt: skip
    stack = LocalStack(settings, log_dir=work / "logs")
    sampler = ProcessSampler().start()
    front: ServiceProcess | None = None
    try:
        settings = await stack.start()
        assert stack.broker is not None
        sampler.watch("broker", stack.broker.pid)
        sampler.watch("processors", stack.service("processors").pid)  # type: ignore[union-attr]
        port = free_port()
        front = ServiceProcess("front-door", agl_command("ingest", "store", "--port", str(port), *front_door_flags(args)),
                               env=stack.env(), log_path=work / "logs" / "front-door.log").start()  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, front)
        sampler.watch("front_door", front.pid)
        idle = idle_cpu(args, sampler)
        spies = _profiler(args, "agl-stream", work)
        if spies is not None:
            spies.attach("front_door", front.pid)
            spies.attach("processors", stack.service("processors").pid)  # type: ignore[union-attr]
        sampler.mark()
        try:
            result = workload(url, args, sampler, work / "logs" / "workload.log")
        finally:
            profile = spies.stop() if spies is not None else None
        result["cpu_s"] = cpu_by_side(sampler)
        if idle is not None:
            result["idle_cpu_s_per_s"] = idle
        if profile is not None:
            result["profile"] = profile
        result["front_door_routes"] = route_latency(url)
        result["span_reads"] = span_read_sources(url)
        assert settings.kafka_bootstrap is not None
        result["topic_records"] = await topic_records(settings.kafka_bootstrap)
        return result
    finally:
        sampler.stop()
        if front is not None:
            front.stop(timeout=30)
        stack.stop()


def run_upstream(args: argparse.Namespace, work: Path, workload: Workload = run_workload) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sampler = ProcessSampler().start()
    log = work / "agl-store.log"
    with log.open("wb") as out:
        store = subprocess.Popen([str(UPSTREAM_VENV / "bin" / "agl"), "store", "--port", str(port), "--log-level", "WARNING"],
                                 stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **UPSTREAM_ENV})  # fmt: skip
    try:
        wait_healthy(url, store)
        sampler.watch("upstream_store", store.pid)
        idle = idle_cpu(args, sampler)
        spies = _profiler(args, "upstream", work)
        if spies is not None:
            spies.attach("upstream_store", store.pid)
        sampler.mark()
        try:
            result = workload(url, args, sampler, work / "workload.log")
        finally:
            profile = spies.stop() if spies is not None else None
        result["cpu_s"] = cpu_by_side(sampler)
        if idle is not None:
            result["idle_cpu_s_per_s"] = idle
        if profile is not None:
            result["profile"] = profile
        return result
    finally:
        sampler.stop()
        store.terminate()
        store.wait(30)


def run_alternating(args: argparse.Namespace, workload: Workload, describe: Callable[[dict[str, Any]], str]) -> dict[str, list[dict[str, Any]]]:
    """``args.runs`` runs per side, alternating (agl-stream, upstream, agl-stream, ...; ``args.only``: one side), each
    side started fresh in a folder of its own (under ``args.keep`` when given, else temporary)."""
    results: dict[str, list[dict[str, Any]]] = {"agl-stream": [], "upstream": []}
    for i in range(args.runs):
        for system in ("agl-stream", "upstream"):
            if args.only and system != args.only:
                continue
            with tempfile.TemporaryDirectory(prefix=f"agl-bench-{system}-") as tmp:
                console.print(f"run {i + 1}/{args.runs}: {system}")
                work = args.keep / f"{system}-{i + 1}" if args.keep else Path(tmp)
                work.mkdir(parents=True, exist_ok=True)
                result = asyncio.run(run_agl_stream(args, work, workload)) if system == "agl-stream" else run_upstream(args, work, workload)
            console.print(describe(result))
            results[system].append(result)
    return results


def summarize(runs: list[dict[str, Any]], rollouts: int) -> dict[str, Any]:
    def spread(values: list[float]) -> dict[str, float]:
        return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}

    return {
        "runs": len(runs),
        "all_verified": all(r["verified"] == rollouts for r in runs),
        "rollouts_per_s": spread([r["rollouts_per_s"] for r in runs]),
        "server_cpu_ms_per_rollout": spread([1000 * r["cpu_s"]["server"] / r["verified"] for r in runs]),
        "client_cpu_ms_per_rollout": spread([1000 * r["cpu_s"]["client"] / r["verified"] for r in runs]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.01, help="agent sleep per span (upstream's default is 1.0)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--only", choices=("agl-stream", "upstream"), default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep each run's logs and data under this folder")
    args = parser.parse_args()
    if not (UPSTREAM_VENV / "bin" / "python").exists():
        raise SystemExit(f"no upstream side venv at {UPSTREAM_VENV}: run `make upstream`")
    results = run_alternating(args, run_workload, lambda r: f"  {({k: v for k, v in r.items() if k != 'front_door_routes'})}")
    report = {"workload": {k: getattr(args, k) for k in ("rollouts", "batch", "runners", "sleep", "partitions")},
              "cpu_count": os.cpu_count(), "runs": results,
              "summary": {name: summarize(runs, args.rollouts) for name, runs in results.items() if runs}}  # fmt: skip
    table = Table(title="upstream's store workload, upstream's client and runners")
    for col in ("system", "runs", "all verified", "rollouts/s", "server CPU ms/rollout", "client CPU ms/rollout"):
        table.add_column(col)
    for name, s in report["summary"].items():
        def fmt(d: dict[str, float]) -> str:
            return f"{d['median']} ({d['min']}-{d['max']})"

        table.add_row(name, str(s["runs"]), str(s["all_verified"]), fmt(s["rollouts_per_s"]),
                      fmt(s["server_cpu_ms_per_rollout"]), fmt(s["client_cpu_ms_per_rollout"]))  # fmt: skip
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
