"""Task success apart from shaped reward: accuracy, pass@k and reward parts from rollout outcomes."""

from __future__ import annotations

import math

import pytest

from agl_stream.algorithm import RolloutResult, pass_at_k, success_report, succeeded


def _r(reward: float | None, status: str = "succeeded", **dims: float) -> RolloutResult:
    return RolloutResult("ro-1", "at-1", status, reward, None, 0.0, dims)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(8, 0, 1) == 0.0 and pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)
    assert pass_at_k(8, 1, 8) == 1.0  # one right among all 8 drawn
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - math.comb(6, 4) / math.comb(8, 4))
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 8)


def test_success_is_the_correct_dimension_not_the_shaped_reward() -> None:
    assert succeeded(_r(0.5, correct=0.0, format=0.5)) == 0.0  # a bare wrong number: format paid, task failed
    assert succeeded(_r(1.0, correct=1.0, format=0.5)) == 1.0
    assert succeeded(_r(1.0)) == 1.0 and succeeded(_r(0.75)) == 0.0  # a plain number: reward >= threshold
    assert succeeded(_r(1.0, status="failed")) == 0.0 and succeeded(None) == 0.0


def test_report_gives_accuracy_pass_at_k_and_parts() -> None:
    item_a = [_r(1.0, correct=1.0, format=0.5), _r(0.5, correct=0.0, format=0.5)]
    item_b = [_r(0.5, correct=0.0, format=0.5), None]  # a missing answer counts as wrong
    report = success_report([item_a, item_b])
    assert report.samples == 2 and report.per_item == [0.5, 0.0] and report.accuracy == 0.25
    assert report.pass_at == {1: 0.25, 2: 0.5}
    assert report.per_item_reward == [0.75, 0.25]
    assert report.parts == {"correct": pytest.approx(1 / 3), "format": 0.5}
    with pytest.raises(ValueError):
        success_report([item_a, item_b[:1]])
