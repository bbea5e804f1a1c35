"""Where a process's busy samples went: py-spy's collapsed stacks, bucketed by what the code was doing.

py-spy samples threads that wait too (in ``select``, ``Condition.wait``, an idle thread-pool worker); those are
left out, and the rest is split into buckets a reader of docs/performance.md can act on: a store front-door route
(the handler function's name), the HTTP machinery around the handlers (uvicorn, Starlette, FastAPI), ClickHouse
inserts and queries, the Kafka client's background work (fetches, produce requests, group coordination, by
aiokafka function), and agl-stream's own code (by its deepest function). Usage::

    python -m tests.benchmarks.spy_breakdown DIR/*.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

#: leaf frames of a thread that waits rather than runs
WAITING = ("EpollSelector.select", "Condition.wait", "_worker (concurrent/futures", "stop_with_parent.<locals>.watch",
           "Event.wait (threading")  # fmt: skip
_ROUTE = re.compile(r"\(ingest/(store/routes|otlp)/")
_OURS = re.compile(r"\((agl_stream|processors|ingest|trainer)/")
_KAFKA = re.compile(r"\((aiokafka|faust|mode)/")  # faust and its service library (mode) run the state machine's clients


def stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def bucket(frames: list[str]) -> str:
    """What one busy stack was doing (see the module doc)."""
    name = lambda frame: frame.split(" (")[0]  # noqa: E731
    route = next((f for f in frames if _ROUTE.search(f)), None)
    if route is not None:
        return f"route {name(route)}"
    if any("clickhouse_connect" in f or "chdb" in f for f in frames):
        return "ClickHouse"
    if any("uvicorn/protocols" in f or "starlette" in f or "fastapi" in f for f in frames):
        return "HTTP machinery (uvicorn, Starlette, FastAPI)"
    ours = [i for i, f in enumerate(frames) if _OURS.search(f)]
    below = frames[ours[-1] + 1:] if ours else frames  # what our deepest frame called, or everything
    kafka = next((f for f in below if _KAFKA.search(f)), None)
    if kafka is not None:
        return f"Kafka client: {name(kafka)}"
    if ours:
        return f"agl-stream: {name(frames[ours[-1]])}"
    return f"other: {name(frames[-1])}"


def breakdown(path: Path, top: int = 12) -> str:
    counts: Counter[str] = Counter()
    total = busy = 0
    for frames, n in stacks(path):
        total += n
        if any(frames[-1].startswith(w) for w in WAITING):
            continue
        busy += n
        counts[bucket(frames)] += n
    if not busy:
        return f"  {total} samples, none busy\n"
    lines = [f"  {total} samples, {busy} busy ({100 * busy / total:.0f}%); of the busy ones:"]
    lines += [f"  {100 * c / busy:5.1f}%  {what}" for what, c in counts.most_common(top)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+", help="py-spy raw (collapsed) files")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    for path in args.files:
        print(f"{path.stem}\n{breakdown(path, args.top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
