"""The nemesis's picture: throughput over the run, and every fault as a bar on its target's row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"kill": "tab:red", "pause": "tab:orange", "partition": "tab:blue"}


def throughput(timeline: list[list[float]], window: float = 5.0) -> tuple[list[float], list[float]]:
    """Rollouts succeeded per second over ``window``-second steps, from cumulative (t, succeeded) samples."""
    xs: list[float] = []
    ys: list[float] = []
    if not timeline:
        return xs, ys
    start = 0
    for i, (t, done) in enumerate(timeline):
        t0, done0 = timeline[start]
        if t - t0 >= window:
            xs.append(t)
            ys.append((done - done0) / (t - t0))
            start = i
    return xs, ys


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    faults = result["applied"]
    targets = sorted({f["target"] for f in faults})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 3 + 0.35 * max(1, len(targets))), sharex=True,
                                      gridspec_kw={"height_ratios": [2, max(1, len(targets)) * 0.5]})  # fmt: skip
    xs, ys = throughput(result["timeline"])
    top.plot(xs, ys, color="black", linewidth=1)
    top.set_ylabel("rollouts/s succeeded")
    a = result["audit"]
    top.set_title(f"nemesis seed {result['seed']}: {a['enqueued']} rollouts, {len(faults)} faults; "
                  f"lost {a['lost']}, duplicated {a['duplicates']}, failed {a['failed']}")  # fmt: skip
    for f in faults:
        row = targets.index(f["target"])
        bottom.barh(row, f["undone_s"] - f["applied_s"], left=f["applied_s"], color=COLORS[f["kind"]], height=0.6)
        top.axvspan(f["applied_s"], f["undone_s"], color=COLORS[f["kind"]], alpha=0.08)
    bottom.set_yticks(range(len(targets)), targets)
    bottom.set_xlabel("seconds")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    bottom.legend(handles, list(COLORS), loc="upper right", fontsize="small", ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
