"""Transition against trajectory aggregation, same seeds and budget: what the learner reads, how fast, how well it learns.

``run`` trains the demo (``examples/demo.py``) once per task, seed and mode, one after the other (each run needs the
machine), and keeps each run's ``report.json`` and ``steps.jsonl`` under ``--out``. ``report`` reads them back and
writes the comparison (JSON, a markdown table, a plot of held-out accuracy against learner seconds):

- learner tokens (non-padding) per trajectory, and the median learner seconds per step;
- the merge rate (calls that joined the previous call's row / calls) and the prefix breaks;
- held-out accuracy before and after, each gain with its 95% bootstrap CI;
- per seed, the difference in gains (trajectory minus transition), paired by held-out item, with its CI.

    .venv/bin/python -m examples.aggregation_study run --tasks calc quiz3 --seeds 1 2 3 --out docs/bench-report/aggregation
    .venv/bin/python -m examples.aggregation_study report --out docs/bench-report/aggregation --png docs/img/aggregation.png
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from agl_stream.algorithm.stats import paired_comparison

ROOT = Path(__file__).resolve().parents[1]
MODES = ("transition", "trajectory")
console = Console()


def run_name(task: str, mode: str, seed: int) -> str:
    return f"{task}-{mode}-seed{seed}"


def parse_run_name(name: str) -> tuple[str, str, int]:
    """``quiz3-trajectory-seed1`` -> ``("quiz3", "trajectory", 1)``: the inverse of :func:`run_name`."""
    head, seed = name.rsplit("-seed", 1)
    task, mode = head.rsplit("-", 1)
    return task, mode, int(seed)


def run_all(tasks: list[str], seeds: list[int], out: Path, work: Path, extra_env: dict[str, str]) -> int:
    """Each (task, seed, mode) once, in that order (the two modes of a seed back to back); a run already kept is skipped."""
    plan = [(task, seed, mode) for task in tasks for seed in seeds for mode in MODES]
    failures = 0
    with Progress(console=console) as progress:
        bar = progress.add_task("aggregation study", total=len(plan))
        for task, seed, mode in plan:
            name = run_name(task, mode, seed)
            kept = out / name
            if (kept / "report.json").exists():
                progress.console.print(f"{name}: kept from before, skipped")
                progress.advance(bar)
                continue
            data_dir = work / name
            shutil.rmtree(data_dir, ignore_errors=True)
            env = {**os.environ, **extra_env, "AGL_DEMO_TASK": task, "AGL_DEMO_AGGREGATION": mode, "AGL_DEMO_SEED": str(seed),
                   "AGL_DATA_DIR": str(data_dir)}  # fmt: skip
            started = time.monotonic()
            log = work / f"{name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "w") as fh:
                code = subprocess.call([sys.executable, "-m", "examples.demo"], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
            run_dir = data_dir / "run"
            if code != 0 or not (run_dir / "report.json").exists():
                failures += 1
                progress.console.print(f"[red]{name}: exit {code}; log {log}")
            else:
                kept.mkdir(parents=True, exist_ok=True)
                for part in ("report.json", "steps.jsonl"):
                    shutil.copy(run_dir / part, kept / part)
                progress.console.print(f"{name}: {time.monotonic() - started:.0f} s")
            progress.advance(bar)
    return 1 if failures else 0


def _steps(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize_run(folder: Path) -> dict[str, Any]:
    """One run's numbers from its report and its learner steps."""
    report = json.loads((folder / "report.json").read_text())
    steps = _steps(folder / "steps.jsonl")
    extra = [s.get("extra", {}) for s in steps]
    tokens, trajectories = sum(e.get("learner_tokens", 0) for e in extra), sum(e.get("trajectories", 0) for e in extra)
    # the same trajectories at one row per call (recorded since the learner counts it): merging's saving, unconfounded
    # by the two runs' different rollouts
    call_rows = sum(e["call_row_tokens"] for e in extra) if extra and all("call_row_tokens" in e for e in extra) else None
    calls, merged = sum(e.get("calls", 0) for e in extra), sum(e.get("merged_calls", 0) for e in extra)
    seconds = [e["step_seconds"] for e in extra if "step_seconds" in e]
    before, after = report.get("val_before", {}), report.get("val_after", {})
    gain = report.get("validation_reward", {})  # the mean reward: the fraction of questions right
    task, mode, _ = parse_run_name(folder.name)  # the folder's name where the report predates its task and mode keys
    return {
        "run": folder.name, "task": report.get("task", task), "aggregation": report.get("aggregation", mode), "steps": report.get("steps"),
        "learner_tokens_per_trajectory": tokens / trajectories if trajectories else None,
        "tokens_of_one_row_per_call": call_rows / trajectories if call_rows and trajectories else None,
        "tokens_vs_one_row_per_call": tokens / call_rows if call_rows else None,
        "median_learner_seconds_per_step": statistics.median(seconds) if seconds else None,
        "learner_seconds": sum(seconds), "merge_rate": merged / calls if calls else None, "calls": calls,
        "calls_per_trajectory": calls / trajectories if trajectories else None,
        "prefix_breaks": sum(e.get("prefix_breaks", 0) for e in extra),
        "accuracy_before": gain.get("mean_before"), "accuracy_after": gain.get("mean_after"), "gain": gain.get("mean_diff"),
        "gain_ci": [gain.get("ci_low"), gain.get("ci_high")],
        "all_right_before": before.get("accuracy"), "all_right_after": after.get("accuracy"),
        "per_item_before": before.get("rewards"), "per_item_after": after.get("rewards"),
        "stop_reason": report.get("stop_reason"), "shortfall": report.get("shortfall"),
    }  # fmt: skip


def compare(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task and seed with both modes: the difference in gains, trajectory minus transition, paired by item."""
    by_key = {(r["task"], r["aggregation"], r["run"].rsplit("seed", 1)[1]): r for r in runs}
    out = []
    for (task, mode, seed), trajectory in sorted(by_key.items()):
        transition = by_key.get((task, "transition", seed))
        if mode != "trajectory" or transition is None or not trajectory["per_item_before"] or not transition["per_item_before"]:
            continue
        gains = {m: [a - b for a, b in zip(r["per_item_after"], r["per_item_before"])] for m, r in (("transition", transition), ("trajectory", trajectory))}
        diff = paired_comparison(gains["transition"], gains["trajectory"])
        out.append({"task": task, "seed": int(seed), "n_items": diff.n, "gain_transition": diff.mean_before,
                    "gain_trajectory": diff.mean_after, "difference": diff.mean_diff, "difference_ci": [diff.ci_low, diff.ci_high],
                    "tokens_ratio": trajectory["learner_tokens_per_trajectory"] / transition["learner_tokens_per_trajectory"],
                    "tokens_ratio_same_trajectories": trajectory["tokens_vs_one_row_per_call"],
                    "seconds_ratio": trajectory["median_learner_seconds_per_step"] / transition["median_learner_seconds_per_step"]})  # fmt: skip
    return out


def table(runs: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> str:
    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    lines = ["| run | steps | tokens / trajectory | same trajectories, one row per call | median s / step | merge rate | "
             "prefix breaks | held-out before -> after | gain [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['run']} | {r['steps']} | {num(r['learner_tokens_per_trajectory'], '.0f')} | "
                     f"{num(r['tokens_of_one_row_per_call'], '.0f')} | "
                     f"{num(r['median_learner_seconds_per_step'], '.1f')} | {num(r['merge_rate'], '.2f')} | {r['prefix_breaks']:.0f} | "
                     f"{num(r['accuracy_before'], '.3f')} -> {num(r['accuracy_after'], '.3f')} | {num(r['gain'], '+.3f')} "
                     f"[{num(r['gain_ci'][0], '+.3f')}, {num(r['gain_ci'][1], '+.3f')}] |")  # fmt: skip
    lines += ["", "| task | seed | gain transition | gain trajectory | difference [95% CI] | tokens ratio | tokens ratio, same "
              "trajectories | s/step ratio |", "|---|---|---|---|---|---|---|---|"]
    for c in comparisons:
        lines.append(f"| {c['task']} | {c['seed']} | {c['gain_transition']:+.3f} | {c['gain_trajectory']:+.3f} | "
                     f"{c['difference']:+.3f} [{c['difference_ci'][0]:+.3f}, {c['difference_ci'][1]:+.3f}] | "
                     f"{c['tokens_ratio']:.2f} | {num(c['tokens_ratio_same_trajectories'], '.2f')} | {c['seconds_ratio']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Held-out accuracy before (at 0 learner seconds) and after (at the run's learner seconds), per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in runs})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.5), squeeze=False)
    colors = {"transition": "tab:gray", "trajectory": "tab:green"}
    for ax, task in zip(axes[0], tasks):
        for r in (r for r in runs if r["task"] == task and r["accuracy_before"] is not None):
            ax.plot([0, r["learner_seconds"]], [r["accuracy_before"], r["accuracy_after"]], marker="o", color=colors[r["aggregation"]],
                    label=r["aggregation"])
        handles = {label: h for h, label in zip(*ax.get_legend_handles_labels())}
        ax.legend(handles.values(), handles.keys())
        ax.set(title=f"{task}: held-out accuracy against learner time", xlabel="learner seconds (sum of steps)",
               ylabel="fraction of held-out questions right", ylim=(0, 1))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every task x seed x mode, one after the other")
    run.add_argument("--tasks", nargs="+", default=["calc", "quiz3"])
    run.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    run.add_argument("--out", type=Path, required=True, help="where each run's report.json and steps.jsonl are kept")
    run.add_argument("--work", type=Path, default=ROOT / ".agl" / "aggregation-study", help="the runs' data folders")
    run.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE", help="more demo knobs (AGL_DEMO_VAL=32, ...)")
    rep = sub.add_parser("report", help="the comparison of the kept runs")
    rep.add_argument("--out", type=Path, required=True)
    rep.add_argument("--png", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_all(args.tasks, args.seeds, args.out, args.work, dict(kv.split("=", 1) for kv in args.env))
    runs = [summarize_run(folder) for folder in sorted(args.out.iterdir()) if (folder / "report.json").exists()]
    if not runs:
        console.print(f"[red]no runs under {args.out}")
        return 1
    comparisons = compare(runs)
    (args.out / "summary.json").write_text(json.dumps({"runs": runs, "comparisons": comparisons}, indent=2))
    text = table(runs, comparisons)
    (args.out / "table.md").write_text(text + "\n")  # what docs/learning.md shows
    console.print(text)
    if args.png:
        plot(runs, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
