"""The demo's pipeline, short and with the tiny random model: every stage must produce data.

Runs ``Trainer(RL(...)).fit`` on the calculator agent exactly as ``make demo`` does (local broker,
processors with the embedded ClickHouse, embedded inference server, a runner process, the GRPO
learner publishing weights), then checks from ClickHouse that spans, rollouts, triplets with token
ids and training steps landed, that the policy version advanced, and that runners generated with
the new versions, and that every evaluation answer's task success (the ``correct`` reward dimension and
the call diagnostics) reached the report and the ``accuracy_by_policy_version`` saved query.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agl_stream.config import Settings
from agl_stream.trainer import Trainer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_short_rl_run_through_every_stage(tmp_path: Path) -> None:
    from examples.demo import AGENT, trainer_config
    from agl_stream_processors.analytics.saved import get_saved_query
    from agl_stream_processors.clickhouse import connect
    from agl_stream_trainer.rl import RL

    rows = [json.loads(line) for line in (ROOT / "examples/calc_agent/data/train.jsonl").read_text().splitlines()]
    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    config = trainer_config(steps=3, model="tiny", seed=0)
    config["batcher"]["batch_groups"] = 2
    # the random tiny model never answers right: every group has equal rewards, which dynamic sampling
    # would (rightly) refuse to train on; this test is about the stages, so it trains on them anyway
    config["batcher"]["drop_zero_variance"] = False
    report = Trainer(RL(config, output_dir=tmp_path / "run", eval_samples=2), n_runners=1, runner_concurrency=8,
                     settings=settings).fit(AGENT, rows[:24], rows[24:30])  # fmt: skip
    assert report["steps"] == 3 and report["policy_version"] == 3
    assert report["validation"]["n"] == 6 and report["validation"]["metric"] == "accuracy"
    assert report["val_before"]["samples"] == 2 and set(report["val_before"]["pass_at"]) == {"1", "2"}
    assert set(report["val_after"]["parts"]) == {"correct", "call_well_formed", "call_correct"}

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        assert ch.scalar("SELECT count() FROM spans FINAL WHERE SpanName = 'openai.chat.completion'") > 0
        assert ch.scalar("SELECT count() FROM rollouts FINAL WHERE Mode = 'val' AND Status = 'succeeded'") == 24
        assert ch.scalar("SELECT min(length(PromptTokenIds)) FROM triplets FINAL") > 0
        assert ch.scalar("SELECT min(length(ResponseTokenIds)) FROM triplets FINAL") > 0
        versions = [r[0] for r in ch.query_rows("SELECT DISTINCT PolicyVersion FROM triplets FINAL WHERE Mode = 'train'")[1]]
        assert max(v for v in versions if v is not None) >= 1, f"runners never used a published version: {versions}"
        # the learner's steps reached ClickHouse during the run, over agl.training_steps
        assert ch.query_rows("SELECT Step, PolicyVersion FROM training_steps FINAL WHERE RunId = 'demo' ORDER BY Step")[1] == [
            (1, 1), (2, 2), (3, 3)
        ]
        # every step says how much of what arrived carried signal
        extras = ch.query_rows("SELECT Extra FROM training_steps FINAL WHERE RunId = 'demo'")[1]
        assert all({"zero_variance_fraction", "effective_batch_size", "signal_groups"} <= set(e[0]) for e in extras)
        # the evaluations' task success, per policy version, from the triplets' reward dimensions
        columns, acc = ch.query_rows(get_saved_query("accuracy_by_policy_version").sql)
        by_eval = {r[columns.index("evaluation")]: dict(zip(columns, r)) for r in acc}
        assert set(by_eval) == {"before", "after"}, acc
        assert by_eval["before"]["policy_version"] == 0 and by_eval["after"]["policy_version"] == 3
        assert by_eval["before"]["items"] == 6 and by_eval["before"]["samples_per_item"] == 2
        assert by_eval["after"]["accuracy"] == report["val_after"]["accuracy"]
    finally:
        ch.close()
