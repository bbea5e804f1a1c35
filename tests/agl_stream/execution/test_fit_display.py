"""Trainer.fit's live display: what it counts from agl.rollouts and agl.training_steps, and what it shows."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agl_stream.execution.fit_display import FitState, render
from agl_stream.types import Rollout, RolloutSnapshot, TrainingStep


def _snapshot(rollout_id: str, status: str, start: float) -> RolloutSnapshot:
    return RolloutSnapshot(rollout=Rollout(rollout_id=rollout_id, status=status, start_time=start))  # type: ignore[arg-type]


def _text(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(renderable)
    return out.getvalue()


def test_rollouts_count_once_when_final_and_only_for_this_job() -> None:
    state = FitState(started_at=1000.0)
    for status in ("queuing", "running", "succeeded", "succeeded"):  # snapshots repeat; a rollout finishes once
        state.on_rollout(_snapshot("ro-a", status, 1001.0), now=1010.0)
    state.on_rollout(_snapshot("ro-b", "failed", 1002.0), now=1012.0)
    state.on_rollout(_snapshot("ro-old", "succeeded", 900.0), now=1012.0)  # an earlier job's, on the same topic
    assert (state.done, state.succeeded, state.failed) == (2, 1, 1)
    assert state.rate(now=1020.0) == pytest.approx(2 / 20)  # since the start, shorter than the 30 s window
    assert state.rate(now=1041.0) == pytest.approx(1 / 30)  # the first finish left the window


def test_eta_follows_the_step_budget_else_the_expected_rollouts() -> None:
    state = FitState(started_at=1000.0, expected_rollouts=10)
    assert state.eta(now=1001.0) is None  # no rate yet
    state.on_rollout(_snapshot("ro-a", "succeeded", 1000.5), now=1005.0)
    state.on_rollout(_snapshot("ro-b", "succeeded", 1000.5), now=1010.0)
    assert state.eta(now=1010.0) == pytest.approx(8 / (2 / 10))
    state.on_step(TrainingStep(run_id="r", step=5, policy_version=5, total_steps=20, timestamp=1100.0))
    state.on_step(TrainingStep(run_id="r", step=4, policy_version=4, total_steps=20, timestamp=1090.0))  # late, older
    assert state.step is not None and state.step.step == 5
    assert state.eta(now=1100.0) == pytest.approx(100 / 5 * 15)
    state.on_step(TrainingStep(run_id="r", step=20, policy_version=20, total_steps=20, timestamp=1400.0))
    assert state.eta(now=1400.0) == 0.0


def test_the_panel_shows_step_version_reward_rollouts_rate_eta_and_the_dashboard() -> None:
    state = FitState(started_at=1000.0)
    state.on_rollout(_snapshot("ro-a", "succeeded", 1001.0), now=1010.0)
    state.on_rollout(_snapshot("ro-b", "failed", 1001.0), now=1010.0)
    state.on_step(TrainingStep(run_id="demo", step=3, policy_version=3, total_steps=12, reward_mean=0.625, loss=0.0123,
                               timestamp=1060.0))  # fmt: skip
    text = _text(render(state, dashboard_url="http://127.0.0.1:4747/?token=t", now=1060.0))
    for expected in ("3/12 steps", "ETA 3m 00s", "step 3", "policy v3", "batch reward 0.625", "2 done", "1 succeeded",
                     "1 failed", "0.0/s", "http://127.0.0.1:4747/?token=t", "elapsed    1m 00s"):  # fmt: skip
        assert expected in text, (expected, text)
    assert "no step yet" in _text(render(FitState(started_at=1000.0), now=1001.0))
