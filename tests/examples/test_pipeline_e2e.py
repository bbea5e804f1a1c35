"""The demo's pipeline, short and with the tiny random model: every stage must produce data.

Runs ``Trainer(RL(...)).fit`` on the arithmetic agent exactly as ``make demo`` does (local broker,
processors with the embedded ClickHouse, embedded inference server, a runner process, the GRPO
learner publishing weights), then checks from ClickHouse that spans, rollouts, triplets with token
ids and training steps landed, that the policy version advanced, and that runners generated with
the new versions.
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
    from examples.demo import trainer_config
    from agl_stream_processors.clickhouse import connect
    from agl_stream_trainer.rl import RL

    rows = [json.loads(line) for line in (ROOT / "examples/arithmetic/data/train.jsonl").read_text().splitlines()]
    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    config = trainer_config(steps=3, model="tiny")
    config["batcher"]["batch_groups"] = 2
    report = Trainer(RL(config, output_dir=tmp_path / "run"), n_runners=1, runner_concurrency=8, settings=settings).fit(
        "examples.arithmetic.agent:arithmetic_agent", rows[:24], rows[24:30]
    )
    assert report["steps"] == 3 and report["policy_version"] == 3
    assert report["validation"]["n"] == 6

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        assert ch.scalar("SELECT count() FROM spans FINAL WHERE SpanName = 'openai.chat.completion'") > 0
        assert ch.scalar("SELECT count() FROM rollouts FINAL WHERE Mode = 'val' AND Status = 'succeeded'") == 12
        assert ch.scalar("SELECT min(length(PromptTokenIds)) FROM triplets FINAL") > 0
        assert ch.scalar("SELECT min(length(ResponseTokenIds)) FROM triplets FINAL") > 0
        versions = [r[0] for r in ch.query_rows("SELECT DISTINCT PolicyVersion FROM triplets FINAL WHERE Mode = 'train'")[1]]
        assert max(v for v in versions if v is not None) >= 1, f"runners never used a published version: {versions}"
        # the learner's steps reached ClickHouse during the run, over agl.training_steps
        assert ch.query_rows("SELECT Step, PolicyVersion FROM training_steps FINAL WHERE RunId = 'demo' ORDER BY Step")[1] == [
            (1, 1), (2, 2), (3, 3)
        ]
    finally:
        ch.close()
