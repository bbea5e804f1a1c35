"""Where a JVM's CPU goes, by thread name: the local Kafka broker's compiler, network and request threads.

py-spy cannot see inside the broker's JVM; the kernel can. Every ``--interval`` seconds this reads each thread's
user+system time from ``/proc/<pid>/task/<tid>/stat`` and keeps the last value seen per thread, so threads that end
before the JVM does still count. When the process exits (or on Ctrl-C) it prints the totals per thread name, digits
folded (``data-plane-kafka-request-handler-3`` -> ``data-plane-kafka-request-handler-N``). Run it beside a
benchmark; without ``--pid`` it waits for the first ``kafka.Kafka`` JVM to appear::

    python -m tests.benchmarks.jvm_threads --json broker-threads.json &
    python tests/benchmarks/bench_upstream_file.py ... --only agl-stream --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Optional

TICK = os.sysconf("SC_CLK_TCK")


def find_kafka(timeout: float) -> Optional[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kafka.Kafka" in argv:
                return int(proc.name)
        time.sleep(0.5)
    return None


def thread_times(pid: int) -> dict[int, tuple[str, float]]:
    """Per thread id: its name and its CPU seconds so far."""
    seen: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # ended between the listing and the read
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seen[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid", type=int, default=None, help="the JVM (default: the first kafka.Kafka to start)")
    parser.add_argument("--wait", type=float, default=600, help="seconds to wait for a kafka.Kafka JVM")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the totals here")
    args = parser.parse_args(argv)
    pid = args.pid or find_kafka(args.wait)
    if pid is None:
        print("error: no kafka.Kafka JVM appeared", file=sys.stderr)
        return 1
    threads: dict[int, tuple[str, float]] = {}
    began = time.monotonic()
    try:
        while Path(f"/proc/{pid}").exists():
            threads.update(thread_times(pid))
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    by_name: Counter[str] = Counter()
    for name, cpu in threads.values():
        by_name[re.sub(r"\d+", "N", name)] += cpu
    total = sum(by_name.values())
    print(f"JVM {pid}: {total:.1f} CPU s over {time.monotonic() - began:.0f} s, {len(threads)} threads")
    for name, cpu in by_name.most_common(15):
        print(f"  {cpu:7.2f} s  {100 * cpu / total if total else 0:5.1f}%  {name}")
    if args.json:
        args.json.write_text(json.dumps({"pid": pid, "cpu_s": round(total, 2),
                                         "by_thread": {k: round(v, 2) for k, v in by_name.most_common()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
