"""What a soak run shows: each process's RSS and CPU per rollout as the work grows, as a table and a PNG.

A soak (``bench_rollouts.py --soak``) samples every process of the stack every few seconds together
with the number of rollouts the driver has seen succeed. This module turns those samples into
checkpoints every ``every`` rollouts and judges them by the long-run bar (issue 22): a process whose
RSS at the end is more than 20% above its RSS at the first checkpoint grows with the work, and CPU per
rollout after the first checkpoint must stay within 10% of the first window's.

Pure functions over plain data, so the tests can hold the arithmetic without running a stack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

# Processes whose CPU is the server side's (the broker, the local Kafka's trimmer, and the processors with the
# embedded engine).
SERVER_PREFIXES = ("broker/", "topics/", "processors/")
RSS_TOLERANCE = 0.20
CPU_TOLERANCE = 0.10
DISK_LIMIT_MB = 2048.0  # the local broker's disk bar (issue 31: under 2 GB at 100,000 rollouts)


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the first enqueue, rollouts succeeded so far, per process (CPU s, RSS MiB)."""

    t: float
    done: int
    procs: dict[str, tuple[float, float]]
    broker_disk_mb: Optional[float] = None  # the local broker's data directory (Apache Kafka; None: not measured)
    # what the processors hold at that moment, per app (sizes from their health report: buffered spans, ...),
    # to tell a process's RSS growth from the work it has in hand
    held: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": round(self.t, 3), "done": self.done,
                               "procs": {k: [round(c, 4), round(r, 1)] for k, (c, r) in self.procs.items()}}  # fmt: skip
        if self.broker_disk_mb is not None:
            out["broker_disk_mb"] = round(self.broker_disk_mb, 1)
        if self.held:
            out["held"] = self.held
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Sample":
        disk = data.get("broker_disk_mb")
        return cls(float(data["t"]), int(data["done"]), {k: (float(v[0]), float(v[1])) for k, v in data["procs"].items()},
                   None if disk is None else float(disk), data.get("held", {}))  # fmt: skip


#: per processors app, the sizes of what it holds (its health report's counters) that a soak records
HELD_COUNTERS = {
    "triplets": ("pending_attempts", "awaiting_decision", "buffered_spans", "rollouts_known", "remembered_attempts",
                 "deferred_settlements"),
    "state-machine": ("rollouts_in_table", "watched"),
}  # fmt: skip


def held_sizes(health_file: Optional[Path]) -> dict[str, dict[str, int]]:
    """What the processors' apps hold now, from their merged health file ({} before it exists)."""
    if health_file is None:
        return {}
    try:
        apps = json.loads(health_file.read_text())["apps"]
    except (OSError, ValueError, KeyError):
        return {}  # not written yet, or caught mid-replace: the next sample reads it
    return {app: {k: int(apps[app][k]) for k in keys if isinstance(apps.get(app, {}).get(k), int)}
            for app, keys in HELD_COUNTERS.items() if app in apps}  # fmt: skip



@dataclass(frozen=True)
class Checkpoint:
    """The first sample at or past ``rollouts`` done, and the CPU per rollout of the window that ends there."""

    rollouts: int  # the checkpoint's nominal count (the sample's own count is ``sample.done``)
    sample: Sample
    cpu_ms_per_rollout: dict[str, float]  # per process, over the window since the previous checkpoint

    @property
    def rss(self) -> dict[str, float]:
        return {k: r for k, (_c, r) in self.sample.procs.items()}

    @property
    def server_cpu_ms(self) -> float:
        return sum(v for k, v in self.cpu_ms_per_rollout.items() if k.startswith(SERVER_PREFIXES))


def checkpoints(samples: Sequence[Sample], every: int) -> list[Checkpoint]:
    """Checkpoints at ``every``, ``2 * every``, ... rollouts, and one at the last sample.

    The window of a checkpoint starts at the previous one (the first window starts at the first
    sample, taken at the first enqueue), so its CPU per rollout is the work of those rollouts alone.
    """
    if every <= 0:
        raise ValueError("every must be positive")
    ordered = sorted(samples, key=lambda s: (s.done, s.t))
    if not ordered:
        return []
    out: list[Checkpoint] = []
    previous = ordered[0]
    target = every
    for sample in ordered:
        if sample.done >= target and sample.done > previous.done:
            out.append(Checkpoint(target, sample, _cpu_per_rollout(previous, sample)))
            previous = sample
            while target <= sample.done:
                target += every
    last = ordered[-1]
    if last.done > previous.done:
        out.append(Checkpoint(last.done, last, _cpu_per_rollout(previous, last)))
    return out


def _cpu_per_rollout(start: Sample, end: Sample) -> dict[str, float]:
    rollouts = end.done - start.done
    return {key: 1000.0 * (cpu - start.procs.get(key, (0.0, 0.0))[0]) / rollouts for key, (cpu, _rss) in end.procs.items()}


@dataclass
class Verdict:
    """RSS growth per process (end vs first checkpoint) and the server's CPU per rollout, first window vs after."""

    rss_growth: dict[str, float] = field(default_factory=dict)  # fraction: 0.1 is +10%
    server_cpu_first_ms: float = 0.0
    server_cpu_after_ms: float = 0.0
    broker_disk_max_mb: Optional[float] = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "rss_growth": {k: round(v, 4) for k, v in self.rss_growth.items()},
                "server_cpu_ms_per_rollout_first": round(self.server_cpu_first_ms, 3),
                "server_cpu_ms_per_rollout_after": round(self.server_cpu_after_ms, 3),
                "broker_disk_max_mb": self.broker_disk_max_mb, "problems": self.problems}  # fmt: skip


def judge(points: Sequence[Checkpoint], *, judged: Optional[Sequence[str]] = None) -> Verdict:
    """Hold the checkpoints to the long-run bar; ``judged``: the process labels held to it (default: all but the driver)."""
    verdict = Verdict()
    if len(points) < 2:
        verdict.problems.append("fewer than two checkpoints: run more rollouts than --soak-every")
        return verdict
    first, last = points[0], points[-1]
    labels = judged if judged is not None else [k for k in last.rss if not k.startswith("driver/")]
    for key in labels:
        base, end = first.rss.get(key), last.rss.get(key)
        if not base or end is None:
            continue
        growth = end / base - 1.0
        verdict.rss_growth[key] = growth
        if growth > RSS_TOLERANCE:
            verdict.problems.append(f"{key}: RSS {base:.0f} -> {end:.0f} MiB (+{100 * growth:.0f}%, bar +{100 * RSS_TOLERANCE:.0f}%)")
    verdict.server_cpu_first_ms = first.server_cpu_ms
    after_rollouts = last.sample.done - first.sample.done
    after_cpu = sum(last.sample.procs[k][0] - first.sample.procs.get(k, (0.0, 0.0))[0]
                    for k in last.sample.procs if k.startswith(SERVER_PREFIXES))  # fmt: skip
    verdict.server_cpu_after_ms = 1000.0 * after_cpu / after_rollouts
    change = verdict.server_cpu_after_ms / verdict.server_cpu_first_ms - 1.0 if verdict.server_cpu_first_ms else 0.0
    if abs(change) > CPU_TOLERANCE:
        verdict.problems.append(f"server CPU per rollout {verdict.server_cpu_first_ms:.1f} ms in the first "
                                f"{first.sample.done} rollouts, {verdict.server_cpu_after_ms:.1f} ms after "
                                f"({100 * change:+.0f}%, bar {100 * CPU_TOLERANCE:.0f}%)")  # fmt: skip
    disks = [p.sample.broker_disk_mb for p in points if p.sample.broker_disk_mb is not None]
    if disks:
        verdict.broker_disk_max_mb = round(max(disks), 1)
        if max(disks) > DISK_LIMIT_MB:
            verdict.problems.append(f"broker disk reached {max(disks):.0f} MiB (bar {DISK_LIMIT_MB:.0f} MiB)")
    return verdict


def markdown_table(points: Sequence[Checkpoint]) -> str:
    """RSS (MiB) of each process and the server's CPU per rollout at every checkpoint."""
    if not points:
        return "(no checkpoints)"
    labels = sorted({k for p in points for k in p.rss if not k.endswith("/launcher")})
    disk = any(p.sample.broker_disk_mb is not None for p in points)
    head = ["rollouts", "elapsed s", "server CPU ms/rollout (window)", *(["broker disk MiB"] if disk else []),
            *[f"{k} RSS MiB" for k in labels]]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        cells = [f"{p.sample.done:,}", f"{p.sample.t:.0f}", f"{p.server_cpu_ms:.1f}",
                 *([f"{p.sample.broker_disk_mb:.0f}" if p.sample.broker_disk_mb is not None else "-"] if disk else []),
                 *[f"{p.rss[k]:.0f}" if k in p.rss else "-" for k in labels]]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(points: Sequence[Checkpoint], samples: Sequence[Sample], path: Path, title: str) -> None:
    """Panels over rollouts done: each process's RSS (every sample), CPU ms per rollout per window, and the
    broker's disk where it was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(samples, key=lambda s: (s.done, s.t))
    disk = [s for s in ordered if s.broker_disk_mb is not None]
    fig, axes = plt.subplots(3 if disk else 2, 1, figsize=(9, 11 if disk else 8), sharex=True)
    ax_rss, ax_cpu = axes[0], axes[1]
    labels = sorted({k for s in ordered for k in s.procs if not k.endswith("/launcher")})
    for key in labels:
        xs = [s.done for s in ordered if key in s.procs]
        ax_rss.plot(xs, [s.procs[key][1] for s in ordered if key in s.procs], label=key, linewidth=1.2)
    ax_rss.set_ylabel("RSS (MiB; runners: largest process)")
    ax_rss.legend(fontsize=7, ncol=2, loc="upper left")
    ax_rss.grid(alpha=0.3)
    xs = [p.sample.done for p in points]
    ax_cpu.plot(xs, [p.server_cpu_ms for p in points], marker="o", color="black", label="server total")
    for key in [k for k in labels if k.startswith(SERVER_PREFIXES)]:
        ax_cpu.plot(xs, [p.cpu_ms_per_rollout.get(key, 0.0) for p in points], marker=".", linewidth=0.9, label=key)
    ax_cpu.set_ylabel("CPU ms per rollout (window since previous point)")
    ax_cpu.set_ylim(bottom=0)
    ax_cpu.legend(fontsize=7, ncol=2, loc="upper left")
    ax_cpu.grid(alpha=0.3)
    if disk:
        ax_disk = axes[2]
        ax_disk.plot([s.done for s in disk], [s.broker_disk_mb for s in disk], color="tab:brown", label="broker data dir")
        ax_disk.axhline(DISK_LIMIT_MB, color="red", linestyle="--", linewidth=0.8, label=f"bar {DISK_LIMIT_MB:.0f} MiB")
        ax_disk.set_ylabel("broker disk (MiB)")
        ax_disk.set_ylim(bottom=0)
        ax_disk.legend(fontsize=7, loc="upper left")
        ax_disk.grid(alpha=0.3)
    axes[-1].set_xlabel("rollouts succeeded")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
