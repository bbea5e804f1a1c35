"""The aggregation study's report: numbers read back from each run's report and learner steps, modes paired by seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.aggregation_study import compare, main, summarize_run


def _run(root: Path, name: str, mode: str, before: list[float], after: list[float], tokens: float, seconds: list[float],
         merged: float) -> None:  # fmt: skip
    folder = root / name
    folder.mkdir(parents=True)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    report = {"task": "quiz3", "aggregation": mode, "steps": len(seconds),
              "val_before": {"rewards": before, "accuracy": 0.1}, "val_after": {"rewards": after, "accuracy": 0.5},
              "validation_reward": {"mean_before": mean(before), "mean_after": mean(after),
                                    "mean_diff": mean(after) - mean(before), "ci_low": 0.0, "ci_high": 0.5}}  # fmt: skip
    (folder / "report.json").write_text(json.dumps(report))
    steps = [{"step": i + 1, "extra": {"learner_tokens": tokens, "trajectories": 8, "calls": 40, "merged_calls": merged,
                                       "step_seconds": s, "prefix_breaks": 0}} for i, s in enumerate(seconds)]  # fmt: skip
    (folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))


def test_the_report_pairs_the_modes_of_a_seed_item_by_item(tmp_path: Path) -> None:
    before = [0.0, 1 / 3, 2 / 3, 0.0]
    _run(tmp_path, "quiz3-transition-seed1", "transition", before, [1 / 3, 1 / 3, 1.0, 1 / 3], 8 * 900, [30, 40, 50], 0)
    _run(tmp_path, "quiz3-trajectory-seed1", "trajectory", before, [2 / 3, 1 / 3, 1.0, 1 / 3], 8 * 300, [10, 20, 30], 32)
    runs = [summarize_run(f) for f in sorted(tmp_path.iterdir())]
    trajectory = next(r for r in runs if r["aggregation"] == "trajectory")
    assert trajectory["learner_tokens_per_trajectory"] == 300 and trajectory["median_learner_seconds_per_step"] == 20
    assert trajectory["merge_rate"] == pytest.approx(0.8) and trajectory["calls_per_trajectory"] == 5
    (pair,) = compare(runs)
    assert (pair["task"], pair["seed"], pair["n_items"]) == ("quiz3", 1, 4)
    assert pair["difference"] == pytest.approx((1 / 3) / 4)  # one item gained a third more with trajectory rows
    assert pair["tokens_ratio"] == pytest.approx(1 / 3) and pair["seconds_ratio"] == pytest.approx(0.5)
    assert main(["report", "--out", str(tmp_path), "--png", str(tmp_path / "plot.png")]) == 0
    assert (tmp_path / "plot.png").stat().st_size > 0
    assert len(json.loads((tmp_path / "summary.json").read_text())["comparisons"]) == 1
    assert "quiz3-trajectory-seed1" in (tmp_path / "table.md").read_text()


def test_the_same_trajectories_ratio_and_a_report_without_its_task_and_mode(tmp_path: Path) -> None:
    """``call_row_tokens`` (what the rollouts would cost at one row per call) gives the unconfounded ratio; a report
    written before the demo kept its task and mode is read by its folder's name."""
    before = [0.0, 1 / 3]
    _run(tmp_path, "quiz3-transition-seed2", "transition", before, [1 / 3, 1 / 3], 8 * 900, [30], 0)
    _run(tmp_path, "quiz3-trajectory-seed2", "trajectory", before, [1 / 3, 2 / 3], 8 * 300, [10], 32)
    folder = tmp_path / "quiz3-trajectory-seed2"
    report = json.loads((folder / "report.json").read_text())
    del report["task"], report["aggregation"]
    (folder / "report.json").write_text(json.dumps(report))
    steps = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    steps[0]["extra"]["call_row_tokens"] = 8 * 1000
    (folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    runs = [summarize_run(f) for f in sorted(tmp_path.iterdir())]
    trajectory = next(r for r in runs if r["run"] == "quiz3-trajectory-seed2")
    assert (trajectory["task"], trajectory["aggregation"]) == ("quiz3", "trajectory")
    assert trajectory["tokens_of_one_row_per_call"] == 1000 and trajectory["tokens_vs_one_row_per_call"] == pytest.approx(0.3)
    (pair,) = compare(runs)
    assert pair["tokens_ratio_same_trajectories"] == pytest.approx(0.3) and pair["tokens_ratio"] == pytest.approx(1 / 3)
