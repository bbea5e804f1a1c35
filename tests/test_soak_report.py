"""The soak's arithmetic (tests/benchmarks/soak_report.py): checkpoints, CPU per rollout per window, the verdict.

tests/benchmarks is not collected (its scripts start whole stacks), so its pure helpers are held here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.soak_report import Sample, checkpoints, held_sizes, judge, markdown_table, plot


def steady(done: int, t: float, *, broker_rss: float = 100.0, sinks_rss: float = 500.0) -> Sample:
    """A stack that spends 4 ms (broker) + 6 ms (sinks) per rollout and 1 ms per rollout in the runners."""
    return Sample(t, done, {
        "broker/tansu": (0.004 * done + 1.0, broker_rss),
        "processors/sinks": (0.006 * done + 2.0, sinks_rss),
        "runners/runner": (0.001 * done, 50.0),
        "driver/python": (5.0, 900.0),
    })  # fmt: skip


def test_checkpoints_split_the_run_into_windows_with_their_own_cpu_per_rollout() -> None:
    samples = [steady(d, d / 100) for d in (0, 150, 310, 420, 605, 700)]
    points = checkpoints(samples, every=200)
    # 310 passes 200, 420 passes 400, 605 passes 600, and the last sample closes the run
    assert [p.sample.done for p in points] == [310, 420, 605, 700]
    assert [p.rollouts for p in points] == [200, 400, 600, 700]
    for p in points:
        assert p.cpu_ms_per_rollout["broker/tansu"] == pytest.approx(4.0)
        assert p.server_cpu_ms == pytest.approx(10.0)  # runners and the driver are not the server


def test_a_process_that_grows_with_the_work_fails_the_verdict() -> None:
    flat = [steady(d, d / 100) for d in range(0, 20_001, 1000)]
    assert judge(checkpoints(flat, 2000)).ok
    growing = [steady(d, d / 100, broker_rss=100 + d / 100) for d in range(0, 20_001, 1000)]
    verdict = judge(checkpoints(growing, 2000))
    assert not verdict.ok
    assert verdict.rss_growth["broker/tansu"] == pytest.approx(300 / 120 - 1)
    assert any("broker/tansu" in p for p in verdict.problems)
    assert "driver/python" not in verdict.rss_growth  # the benchmark's own process is not judged


def test_cpu_per_rollout_that_drifts_fails_the_verdict() -> None:
    samples = []
    cpu = 0.0
    for d in range(0, 10_001, 500):
        samples.append(Sample(d / 100, d, {"broker/tansu": (cpu, 100.0)}))
        cpu += 500 * (0.010 if d < 2000 else 0.012)  # 10 ms per rollout, then 12 ms: +20%
    verdict = judge(checkpoints(samples, 2000))
    assert verdict.server_cpu_first_ms == pytest.approx(10.0)
    assert verdict.server_cpu_after_ms == pytest.approx(12.0, rel=0.01)
    assert not verdict.ok


def test_one_checkpoint_is_not_a_soak() -> None:
    assert not judge(checkpoints([steady(0, 0), steady(500, 5)], 2000)).ok


def test_table_and_plot(tmp_path: Path) -> None:
    samples = [steady(d, d / 100) for d in range(0, 6001, 250)]
    points = checkpoints(samples, 2000)
    table = markdown_table(points)
    assert table.splitlines()[0].startswith("| rollouts |") and "| 6,000 |" in table
    out = tmp_path / "soak.png"
    plot(points, samples, out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Sample.from_json(samples[3].to_json()) == samples[3]


def test_broker_disk_is_judged_tabled_and_plotted(tmp_path: Path) -> None:
    from dataclasses import replace

    bounded = [replace(steady(d, d / 100), broker_disk_mb=300.0 + (d % 4000) / 40) for d in range(0, 20_001, 1000)]
    verdict = judge(checkpoints(bounded, 2000))
    assert verdict.ok and verdict.broker_disk_max_mb == pytest.approx(350.0)
    assert "broker disk MiB" in markdown_table(checkpoints(bounded, 2000))
    growing = [replace(steady(d, d / 100), broker_disk_mb=d / 5) for d in range(0, 20_001, 1000)]
    problems = judge(checkpoints(growing, 2000)).problems
    assert any("broker disk reached 4000 MiB" in p for p in problems), problems
    assert Sample.from_json(growing[3].to_json()) == growing[3]
    png = tmp_path / "soak.png"
    plot(checkpoints(bounded, 2000), bounded, png, "disk")
    assert png.stat().st_size > 10_000


def test_what_the_apps_hold_is_read_from_the_health_file_and_kept_in_the_samples(tmp_path: Path) -> None:
    health = tmp_path / "processors.health.json"
    assert held_sizes(health) == {}  # not written yet
    health.write_text('{"apps": {"triplets": {"status": "running", "buffered_spans": 42, "awaiting_decision": 3, '
                      '"dead_letters": {}}, "sinks": {"spans": {"records": 9}}}}')  # fmt: skip
    held = held_sizes(health)
    assert held == {"triplets": {"buffered_spans": 42, "awaiting_decision": 3}}
    sample = Sample(1.0, 10, {"processors/triplets": (0.5, 150.0)}, 12.5, held)
    assert Sample.from_json(sample.to_json()) == sample
    health.write_text('{"apps": ')  # caught mid-write
    assert held_sizes(health) == {}
