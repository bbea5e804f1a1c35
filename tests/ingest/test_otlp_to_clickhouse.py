"""OTLP/HTTP all the way to ClickHouse: a plain OpenTelemetry program (no agl imports) exports to
the receiver, the span sink consumes agl.spans, and the rows are in the spans table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.otlp.app import create_app
from tests.ingest.helpers import ServedApp

pytestmark = pytest.mark.integration

PROGRAM = Path(__file__).with_name("otel_program.py")


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
async def test_plain_otel_program_spans_land_in_clickhouse(topics: Settings, encoding: str) -> None:
    from agl_stream_processors.clickhouse import connect
    from agl_stream_processors.sinks import run_sinks

    rollout_id = "ro-00000000c11c" if encoding == "json" else "ro-00000000c11b"
    with ServedApp(create_app(topics, IngestOptions())) as receiver:
        done = subprocess.run(
            [sys.executable, str(PROGRAM), f"{receiver.url}/v1/traces", rollout_id, "at-0000c11c", encoding],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    await run_sinks(topics, ["spans"], idle_exit=3.0)  # drains agl.spans, then stops
    ch = connect(topics.effective_clickhouse_dsn, create_database=True)
    try:
        _columns, rows = ch.query_rows(
            "SELECT SpanName, RolloutId, AttemptId, SpanAttributes['gen_ai.system'] FROM spans FINAL "
            "WHERE RolloutId = {rid:String} ORDER BY SpanName",
            {"rid": rollout_id},
        )
    finally:
        ch.close()
    names = [r[0] for r in rows]
    assert names == ["agent.run", "agentlightning.annotation", "openai.chat.completion"]
    assert all(r[1] == rollout_id and r[2] == "at-0000c11c" for r in rows)
    llm = rows[2]
    assert llm[3] == "openai"
