"""Crash safety: SIGKILL the sink process mid-stream, restart it, and every span and triplet is stored exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream_processors.clickhouse import connect
from tests.processors.clickhouse.store import make_span, make_trajectory

REPO = Path(__file__).resolve().parents[3]


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env.update(
        AGL_KAFKA_BOOTSTRAP=str(settings.kafka_bootstrap),
        AGL_TOPIC_PREFIX=settings.topic_prefix,
        AGL_PARTITIONS=str(settings.partitions),
        AGL_DATA_DIR=str(settings.data_dir),
        AGL_KAFKA_SESSION_TIMEOUT_MS=str(settings.kafka_session_timeout_ms),
        PYTHONPATH=str(REPO),
    )
    if settings.clickhouse_dsn:
        env["AGL_CLICKHOUSE_DSN"] = settings.clickhouse_dsn
    return env


async def _start_sinks(settings: Settings, *extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agl_stream.cli.main", "clickhouse", "sink", "spans", "triplets",
        "--batch-size", "100", "--max-wait", "0.05", "--health-interval", "0.1", "--migrate", *extra,
        cwd=str(REPO), env=_env(settings), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def _produce(settings: Settings, first: int, count: int) -> None:
    async with RecordProducer(settings) as producer:
        spans = [(f"ro-{i % 50:012x}", make_span(f"ro-{i % 50:012x}", sequence_id=i + 1, span_id=f"{i:016x}")) for i in range(first, first + count)]
        await producer.send_many(settings.topic("spans"), spans)  # type: ignore[arg-type]
        trajectories = [
            (f"ro-{i:012x}", make_trajectory(f"ro-{i:012x}", attempt_id=f"at-{i:08x}", n=2)) for i in range(first // 20, (first + count) // 20)
        ]
        await producer.send_many(settings.topic("triplets"), trajectories)  # type: ignore[arg-type]


async def _health(process: asyncio.subprocess.Process) -> Optional[dict]:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
    if not line:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return {}


@pytest.mark.integration
async def test_sigkill_mid_stream_then_restart_stores_everything_once(topics: Settings, store_settings: Settings) -> None:
    settings = store_settings
    await _produce(settings, 0, 6000)  # 6000 spans, 300 trajectories (600 triplets)

    first = await _start_sinks(settings)
    killed_at: Optional[dict] = None
    while killed_at is None:
        health = await _health(first)
        assert health is not None, "the sink process exited before it could be killed"
        spans = health.get("health", {}).get("spans", {})
        if spans.get("rows", 0) > 0:
            first.send_signal(signal.SIGKILL)
            killed_at = spans
    await first.wait()
    assert first.returncode == -signal.SIGKILL
    assert killed_at["rows"] < 6000, "the kill must land in the middle of the stream"

    await _produce(settings, 6000, 2000)  # the stream goes on while the sinks are down

    second = await _start_sinks(settings, "--until-idle", "2")
    assert await asyncio.wait_for(second.wait(), timeout=120) == 0

    with connect(settings.effective_clickhouse_dsn) as ch:
        raw = ch.scalar("SELECT count() FROM spans")
        print(f"killed after {killed_at['rows']} span rows; {raw} raw span rows (duplicates not yet merged included)")
        assert ch.scalar("SELECT count() FROM spans FINAL") == 8000
        assert ch.scalar("SELECT count() FROM (SELECT RolloutId, AttemptId, SpanId FROM spans GROUP BY ALL)") == 8000
        assert ch.scalar("SELECT count() FROM triplets FINAL") == 800
        assert ch.scalar(
            "SELECT count() FROM (SELECT RolloutId, AttemptId, Adapter, TripletIndex FROM triplets GROUP BY ALL)"
        ) == 800
        # every stored span is one that was produced: ids 0..7999
        assert ch.query_rows("SELECT uniqExact(SpanId), min(SpanId), max(SpanId) FROM spans")[1] == [
            (8000, f"{0:016x}", f"{7999:016x}")
        ]
