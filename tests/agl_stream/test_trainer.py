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


def test_fit_serves_the_dashboard_and_shows_progress(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """While the job runs, the printed dashboard URL answers with live panels (read through the SQL door)."""
    import asyncio
    import re

    import httpx

    from agl_stream.algorithm import RolloutResults, run_dataset

    settings = _settings(tmp_path)

    @algo
    async def run_then_look(*, client, settings, train_dataset):  # type: ignore[no-untyped-def]
        results = await RolloutResults(settings).start()
        try:
            outcomes = await run_dataset(client, results, train_dataset, mode="train", timeout=120)
        finally:
            await results.stop()
        log = (settings.data_dir / "logs" / "dashboard.log").read_text()
        url = re.search(r"agl-stream dashboard: (http://\S+)", log).group(1)  # type: ignore[union-attr]
        base, token = url.split("/?token=")
        async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
            for _ in range(120):  # the sinks write the last snapshots within a batch interval
                answer = (await http.get(f"{base}/api/panels", params={"names": "rollout_rates,recent_rollouts"})).json()
                if answer["panels"]["rollout_rates"]["rows"][0][:2] == [len(train_dataset), 0]:
                    break
                await asyncio.sleep(0.25)
        return {"outcomes": sorted(o.status for o in outcomes if o is not None), "url": url, "answer": answer}

    items = [{"x": i, "score": 1.0} for i in range(3)]
    report = Trainer(run_then_look, n_runners=1, runner_concurrency=3, settings=settings).fit(scoring_agent, items)
    assert report["outcomes"] == ["succeeded"] * 3 and report["url"].startswith("http://127.0.0.1:")
    assert report["answer"]["source"]["kind"] == "door"  # the processors own the engine; the page reads through their door
    assert report["answer"]["panels"]["rollout_rates"]["rows"][0][:2] == [3, 0]
    assert len(report["answer"]["panels"]["recent_rollouts"]["rows"]) == 3
    err = capfd.readouterr().err
    assert f"agl-stream dashboard: {report['url']}" in err  # printed while it runs (not a terminal: once)
    assert "3 done" in err and "succeeded" in err  # the progress panel, printed at the end off a terminal
