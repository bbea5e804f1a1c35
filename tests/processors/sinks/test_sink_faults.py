"""Sinks under ClickHouse faults (the ``AGL_CLICKHOUSE_FAILPOINT`` of :mod:`agl_stream_processors.clickhouse.failpoint`),
against a real broker and the embedded engine.

Why: the chaos scenarios (``tests/faults/test_chaos_clickhouse.py``) rely on two sink properties that
are cheap to pin down here: nothing is committed while inserts fail (the backlog is re-read, never
skipped), and a slow ClickHouse leaves the backlog in Kafka: a sink never holds more than
``max_pending`` = 2 x ``batch_size`` records.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer, connection_options
from agl_stream_processors.clickhouse import ClickHouse, connect, migrate
from agl_stream_processors.clickhouse.failpoint import ENV
from agl_stream_processors.sinks import SinkOptions, SinkService
from tests.processors.clickhouse.store import make_span

pytestmark = pytest.mark.integration


@pytest.fixture
def failpoint(tmp_path: Path) -> Path:
    return tmp_path / "clickhouse.failpoint"


@pytest.fixture
def faulty_ch(settings: Settings, failpoint: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClickHouse]:
    """A migrated embedded store whose client obeys ``failpoint`` (the variable is read at connect time)."""
    monkeypatch.setenv(ENV, str(failpoint))
    client = connect(settings.effective_clickhouse_dsn, create_database=True)
    monkeypatch.delenv(ENV)
    migrate(client)
    try:
        yield client
    finally:
        failpoint.unlink(missing_ok=True)
        client.close()


def _arm(path: Path, text: str = "") -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def _produce_spans(settings: Settings, count: int) -> None:
    rollouts = [f"ro-{i % 20:012x}" for i in range(count)]
    spans = [(r, make_span(r, sequence_id=i + 1, span_id=f"{i:016x}")) for i, r in enumerate(rollouts)]
    async with RecordProducer(settings) as producer:
        await producer.send_many(settings.topic("spans"), spans)  # type: ignore[arg-type]


async def _committed(settings: Settings, group: str) -> int:
    """The group's committed offsets on the spans topic, summed (read without joining the group)."""
    consumer = AIOKafkaConsumer(**connection_options(settings), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        topic = settings.topic("spans")
        return sum([(await consumer.committed(TopicPartition(topic, p))) or 0 for p in range(settings.partitions)])
    finally:
        await consumer.stop()


async def test_nothing_is_committed_while_clickhouse_is_down(
    topics: Settings, faulty_ch: ClickHouse, failpoint: Path
) -> None:
    settings = topics
    stop = asyncio.Event()
    service = SinkService(settings, ["spans"], ch=faulty_ch, options=SinkOptions(batch_size=50, max_wait=0.1,
                          retry_initial=0.05, retry_max=0.2), apply_migrations=False)  # fmt: skip
    task = asyncio.create_task(service.run(stop))
    try:
        while not service.sinks:  # past the start-up schema check (an outage there stops the service)
            assert not task.done()
            await asyncio.sleep(0.01)
        _arm(failpoint)  # ClickHouse goes down before any record arrives
        await _produce_spans(settings, 200)
        while not (service.sinks and service.sinks[0].stats.retries >= 5):
            assert not task.done(), "the sink must keep retrying, not exit"
            await asyncio.sleep(0.05)
        stats = service.sinks[0].stats
        assert "injected by failpoint" in str(stats.last_error)
        assert (stats.records, stats.commits) == (0, 0) and stats.pending > 0
        assert await _committed(settings, "agl-sink-spans") == 0  # the broker agrees: nothing committed
        failpoint.unlink()  # ClickHouse is back
        while stats.records < 200:
            assert not task.done()
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    assert stats.last_error is None and stats.pending == 0
    assert await _committed(settings, "agl-sink-spans") == 200
    assert faulty_ch.scalar("SELECT count() FROM spans FINAL") == 200


async def test_a_slow_clickhouse_leaves_the_backlog_in_kafka(
    topics: Settings, faulty_ch: ClickHouse, failpoint: Path
) -> None:
    settings = topics
    options = SinkOptions(batch_size=20, max_wait=0.05, poll_timeout=0.05)
    _arm(failpoint, "0.2")  # every insert takes 0.2 s
    await _produce_spans(settings, 200)  # 10 batches: far more than the sink may hold
    stop = asyncio.Event()
    service = SinkService(settings, ["spans"], ch=faulty_ch, options=options, apply_migrations=False)
    task = asyncio.create_task(service.run(stop))
    peak = 0
    try:
        while not (service.sinks and service.sinks[0].stats.records >= 200):
            assert not task.done()
            if service.sinks:
                peak = max(peak, service.sinks[0].stats.pending)
            await asyncio.sleep(0.005)
    finally:
        stop.set()
        await task
    stats = service.sinks[0].stats
    assert stats.max_pending == 2 * options.batch_size == stats.as_dict()["max_pending"]
    # the bound was reached (the backlog was larger) and never exceeded
    assert peak == stats.max_pending, f"the sink held up to {peak} records; the bound is {stats.max_pending}"
    assert stats.retries == 0  # slow is not failing
    assert faulty_ch.scalar("SELECT count() FROM spans FINAL") == 200
