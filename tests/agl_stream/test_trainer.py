"""The Trainer facade runs a whole job on the local stack: broker, topics, processors, runners."""

from __future__ import annotations

from pathlib import Path

import pytest

from agl_stream.algorithm import algo
from agl_stream.config import Settings
from agl_stream.trainer import Trainer, agent_path
from tests.agl_stream.agents_for_tests import failing_agent, scoring_agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)


def test_agent_path() -> None:
    assert agent_path(scoring_agent) == "tests.agl_stream.agents_for_tests:scoring_agent"
    assert agent_path("pkg.mod:obj") == "pkg.mod:obj"


def test_dev_runs_baseline_end_to_end(tmp_path: Path) -> None:
    items = [{"x": i, "score": i / 10} for i in range(12)]
    report = Trainer(n_runners=1, runner_concurrency=4, settings=_settings(tmp_path)).dev(scoring_agent, items)
    assert report["train"]["rollouts"] == 10  # dev caps the dataset
    assert report["train"]["succeeded"] == 10 and report["train"]["missing"] == 0
    assert report["train"]["mean_reward"] == pytest.approx(sum(i / 10 for i in range(10)) / 10)


def test_custom_algorithm_sees_failures(tmp_path: Path) -> None:
    from agl_stream.algorithm import RolloutResults, run_dataset

    @algo
    async def count_outcomes(*, client, settings, train_dataset):  # type: ignore[no-untyped-def]
        results = await RolloutResults(settings).start()
        try:
            outcomes = await run_dataset(client, results, train_dataset, mode="train", timeout=120)
        finally:
            await results.stop()
        return sorted(o.status for o in outcomes if o is not None)

    items = [{"x": i, "score": 1.0, "fail": i % 2 == 0} for i in range(4)]
    statuses = Trainer(count_outcomes, n_runners=1, runner_concurrency=2, settings=_settings(tmp_path)).fit(failing_agent, items)
    assert statuses == ["failed", "failed", "succeeded", "succeeded"]


def test_functional_algorithm_rejects_unexpected_dataset(tmp_path: Path) -> None:
    @algo
    async def no_datasets(*, client):  # type: ignore[no-untyped-def]
        return "ran"

    with pytest.raises(TypeError, match="does not accept train_dataset"):
        Trainer(no_datasets, settings=_settings(tmp_path)).fit(scoring_agent, [{"x": 1, "score": 1}])
