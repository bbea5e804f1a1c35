"""Golden end-to-end run: runner -> agl.spans -> triplet processor -> agl.triplets -> ClickHouse rows.

The agent (``golden_agent``) makes three LLM calls with known token ids inside nested agents
(``planner`` containing ``writer``), emits a reward mid-rollout and a final reward. The rows in
ClickHouse must carry exactly those token ids, in call order, with upstream's reward matching:
the intermediate reward goes to the call it follows, the final reward to the last call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agl_stream.config import Settings
from agl_stream.trainer import Trainer
from tests.agl_stream.agents_for_tests import golden_agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALLS = {"r1": ([1, 2, 3], [4, 5]), "r2": ([6, 7], [8]), "r3": ([9], [10, 11])}


def _run(tmp_path: Path, adapter: str | None) -> list[dict]:
    from agl_stream_processors.clickhouse import connect

    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    report = Trainer(n_runners=1, adapter=adapter, settings=settings).fit(golden_agent, [{"final": 1.0}, {"final": 2.0}])
    assert report["train"]["succeeded"] == 2
    ch = connect(settings.effective_clickhouse_dsn)
    try:
        cols, rows = ch.query_rows(
            "SELECT RolloutId, TripletIndex, PromptTokenIds, ResponseTokenIds, ResponseLogprobs, Reward, FinalReward "
            "FROM triplets FINAL ORDER BY FinalReward, TripletIndex"
        )
        spans = ch.scalar("SELECT count() FROM spans FINAL")
        assert spans == 2 * (2 + 3 + 2)  # per rollout: 2 agent spans, 3 LLM calls, 2 reward spans
    finally:
        ch.close()
    return [dict(zip(cols, row)) for row in rows]


def test_golden_trajectories_in_clickhouse(tmp_path: Path) -> None:
    rows = _run(tmp_path, None)
    assert len(rows) == 6
    for final, part in ((1.0, rows[:3]), (2.0, rows[3:])):
        assert [(r["PromptTokenIds"], r["ResponseTokenIds"]) for r in part] == list(CALLS.values())
        assert [r["Reward"] for r in part] == [None, 0.5, final]
        assert all(r["FinalReward"] == final for r in part)
        assert part[0]["ResponseLogprobs"] == [-0.5, -0.5]


def test_agent_match_keeps_only_the_matching_agent(tmp_path: Path) -> None:
    rows = _run(tmp_path, "tracer:agent_match=writer")
    assert [(r["PromptTokenIds"], r["ResponseTokenIds"]) for r in rows] == [CALLS["r2"], CALLS["r2"]]
