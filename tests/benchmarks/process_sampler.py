"""CPU seconds and peak RSS per process of the benchmarked stack, read from /proc (psutil).

Each watched *role* is a process tree (the broker, the processors service, the runner service);
every process in it is sampled every ``interval`` seconds in a thread, keeping its peak RSS and its
latest CPU time (user + system). A process is labelled ``role/name``: the processors and runner
services name their processes (``setproctitle``-free: the label comes from the command line, see
:func:`label`), so per-app figures come out without any cooperation from the services.

CPU over a window: :meth:`ProcessSampler.mark` takes a reading of every process at the start of
the window (after start-up, before the first enqueue), :meth:`ProcessSampler.cpu_since` the
difference at its end. A process that exits inside the window keeps its last sample, so a sample
right before stopping a service (:meth:`sample`) keeps its figures exact to ``interval``.
"""

from __future__ import annotations

import statistics
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import psutil


@dataclass
class _Proc:
    role: str
    name: str
    pid: int
    peak_rss: float = 0.0  # MiB
    rss: float = 0.0  # MiB, latest reading
    cpu: float = 0.0  # seconds, latest reading
    cpu_at_mark: Optional[float] = None


def label(proc: psutil.Process) -> str:
    """A short name for a process of the stack: the app or command it runs, from its command line."""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "?"
    if "agl_stream.cli.main" in cmd:
        args = cmd[cmd.index("agl_stream.cli.main") + 1 :]
        words = [a for a in args if not a.startswith("-")]
        if not words:
            return "agl-stream"
        if words[0] == "processors" and len(words) > 1 and words[1] in ("state-machine", "triplets", "sinks"):
            return words[1]
        return words[0]
    return proc.name()


@dataclass
class ProcessSampler:
    interval: float = 0.25
    roots: dict[str, int] = field(default_factory=dict)
    procs: dict[int, _Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="process-sampler")
        self.roots["driver"] = psutil.Process().pid

    def watch(self, role: str, pid: Optional[int]) -> None:
        if pid is not None:
            self.roots[role] = pid

    def start(self) -> "ProcessSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def sample(self) -> None:
        with self._lock:
            for role, pid in list(self.roots.items()):
                try:
                    root = psutil.Process(pid)
                    tree = [root] if role == "driver" else [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
                for proc in tree:
                    try:
                        with proc.oneshot():
                            times = proc.cpu_times()
                            rss = proc.memory_info().rss / 2**20
                    except psutil.Error:
                        continue
                    known = self.procs.get(proc.pid)
                    if known is None:
                        # a service that starts several processes of itself: the root only launches them
                        name = "launcher" if proc.pid == pid and len(tree) > 1 and role == "runners" else label(proc)
                        known = self.procs[proc.pid] = _Proc(role, name, proc.pid)
                    known.cpu = times.user + times.system
                    known.rss = rss
                    known.peak_rss = max(known.peak_rss, rss)

    def mark(self) -> None:
        """Start the CPU window: every process's CPU time now (processes born later start from 0)."""
        self.sample()
        with self._lock:
            for proc in self.procs.values():
                proc.cpu_at_mark = proc.cpu

    def cpu_since(self) -> dict[str, float]:
        """CPU seconds per ``role/name`` since :meth:`mark` (summed over processes of the same label)."""
        self.sample()
        out: dict[str, float] = defaultdict(float)
        with self._lock:
            for proc in self.procs.values():
                out[f"{proc.role}/{proc.name}"] += proc.cpu - (proc.cpu_at_mark or 0.0)
        return dict(out)

    def snapshot(self) -> dict[str, tuple[float, float]]:
        """Per ``role/name``: (CPU seconds since start, summed; latest RSS in MiB, the largest process's).

        A soak reads this every few seconds to see whether any process grows with the work. A process
        that has exited keeps its last reading, so CPU totals never go backwards.
        """
        out: dict[str, tuple[float, float]] = {}
        with self._lock:
            for proc in self.procs.values():
                key = f"{proc.role}/{proc.name}"
                cpu, rss = out.get(key, (0.0, 0.0))
                out[key] = (cpu + proc.cpu, max(rss, proc.rss))
        return out

    def peak_rss(self) -> dict[str, float]:
        """Largest peak RSS (MiB) of any process per ``role/name``."""
        out: dict[str, float] = {}
        with self._lock:
            for proc in self.procs.values():
                key = f"{proc.role}/{proc.name}"
                out[key] = max(out.get(key, 0.0), proc.peak_rss)
        return out

    def runner_rss(self) -> dict[str, float]:
        """Peak RSS of the runner processes (the service's launcher left out): max and median."""
        with self._lock:
            peaks = sorted((p.peak_rss for p in self.procs.values() if p.role == "runners" and p.name == "runner"),
                           reverse=True)  # fmt: skip
        return {"max": peaks[0] if peaks else 0.0, "median": statistics.median(peaks) if peaks else 0.0,
                "processes": float(len(peaks))}  # fmt: skip

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)
