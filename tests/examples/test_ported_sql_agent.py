"""Agent Lightning's Spider SQL agent and its VERL training script, ported (examples/ported/spider_sql).

``python train_sql_agent.py tiny --active-agent write`` runs as a user would, in a copy of the example
folder: ``agl.VERL`` reads upstream's verl config, ``agl.Trainer(n_runners=10, adapter={"agent_match":
...})`` sends the ``LitSQLAgent()`` object to ten runner processes and the adapter to the processors.
The substitution is the ``tiny`` configuration (agl-stream's random tiny model on the CPU, one learner
step) instead of ``fast``/``qwen``, whose Hugging Face models cannot be downloaded here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/ported/spider_sql"


def test_ported_sql_agent_trains_one_step(tmp_path: Path) -> None:
    from agl_stream_processors.clickhouse import connect

    work = tmp_path / "spider_sql"
    shutil.copytree(EXAMPLE, work)
    data_dir = tmp_path / "agl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env.update(AGL_DATA_DIR=str(data_dir), AGL_PARTITIONS="2", AGL_KAFKA_SESSION_TIMEOUT_MS="6000", HF_HUB_OFFLINE="1")
    run = subprocess.run([sys.executable, "train_sql_agent.py", "tiny", "--active-agent", "write"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=290)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "Adapter agent match acknowledged: write" in run.stdout

    report = json.loads((data_dir / "runs/spider_tiny/report.json").read_text())
    assert report["steps"] == 1 and report["policy_version"] == 1  # trainer.total_training_steps
    assert len(report["val_before"]["rewards"]) == 2  # trainer.val_before_train, on test_tiny.jsonl

    ch = connect(f"chdb://{data_dir / 'clickhouse'}")
    try:
        adapters = [r[0] for r in ch.query_rows("SELECT DISTINCT Adapter FROM triplets FINAL")[1]]
        metadata = [json.loads(r[0]) for r in ch.query_rows("SELECT Metadata FROM triplets FINAL")[1]]
        agents = {r[0] for r in ch.query_rows(
            "SELECT DISTINCT SpanAttributes['gen_ai.agent.name'] FROM spans FINAL WHERE SpanName != 'openai.chat.completion'"
        )[1]}  # fmt: skip
        calls_per_rollout = [r[0] for r in ch.query_rows(
            "SELECT count() FROM spans FINAL WHERE SpanName = 'openai.chat.completion' GROUP BY RolloutId"
        )[1]]  # fmt: skip
    finally:
        ch.close()
    assert adapters and all("agent_match='write'" in a for a in adapters)  # the adapter dict reached the processors
    assert metadata and {m["agent_name"] for m in metadata} <= {"write_query", "rewrite_query"}
    assert {"write_query", "check_query", "execute_query"} <= agents  # check calls were traced, and left out
    # max_turns=3 (LitSQLAgent's default, sent with the object): at most write + 2 rewrites, each checked
    assert calls_per_rollout and max(calls_per_rollout) <= 6
