"""The broker-parity set: the same checks on Apache Kafka and on the Tansu fallback.

Produce and consume through agl-stream's wrappers, consumer groups (split, commit, resume), the
compacted topics' latest-value-per-key reading, and the whole pipeline end to end (runners,
processors, ClickHouse) audited for exactly-once. Each kind gets its own broker for the module;
the Kafka side is skipped, with the reason, where Java 17+ or the jars are missing.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from agl_stream import RolloutSnapshot, Settings
from agl_stream.broker import BrokerKind, choose_local_broker, local_broker
from agl_stream.kafka import (
    KAFKA_HOP_FETCH_WAIT_MS, LOW_LATENCY_FETCH_WAIT_MS, RecordConsumer, RecordProducer, hop_fetch_wait_ms, is_tansu,
)
from agl_stream_processors.state_machine.catchup import read_to_end
from agl_stream_topics.admin import ensure_topics
from tests.agl_stream.samples import SAMPLES
from tests.faults.audit import audit
from tests.faults.harness import Pipeline, enqueue, make_tasks
from tests.faults.report import report
from tests.faults.scenario import assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _kafka_here() -> bool:
    try:
        return choose_local_broker(Settings.from_env(env={"AGL_LOCAL_BROKER": "kafka"})) == "kafka"
    except Exception:
        return False


KINDS = [
    pytest.param("kafka", marks=pytest.mark.skipif(not _kafka_here(), reason="Apache Kafka cannot run here (Java 17+ and its jars)")),
    pytest.param("tansu"),
]


@pytest.fixture(scope="module", params=KINDS)
def parity_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerKind, str]]:
    kind: BrokerKind = request.param
    folder = tmp_path_factory.mktemp(f"parity-{kind}")
    with local_broker(Settings.from_env(env={}), kind=kind, log_file=folder / "broker.log", data_dir=folder / "data") as broker:
        yield kind, broker.bootstrap


@pytest.fixture
async def parity_topics(parity_broker: tuple[BrokerKind, str], tmp_path: Path) -> Settings:
    kind, bootstrap = parity_broker
    settings = Settings.from_env(env={}, kafka_bootstrap=bootstrap, topic_prefix=f"p{secrets.token_hex(4)}", partitions=2,
                                 kafka_session_timeout_ms=6000, data_dir=tmp_path / "agl")  # fmt: skip
    assert (await ensure_topics(settings, strict=True)).ok
    return settings


async def test_produce_and_consume_keep_order_keys_and_headers(parity_topics: Settings) -> None:
    topic = parity_topics.topic("spans")
    sent = [(f"ro-{i % 3}", f"value-{i}".encode()) for i in range(60)]
    async with RecordProducer(parity_topics) as producer:
        for key, value in sent:
            await producer.send(topic, value, key=key, headers={"n": value})
    got: list[tuple[str, bytes, bytes]] = []
    async with RecordConsumer(parity_topics, [topic], group_id=None) as consumer:
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            for record in await consumer.getmany(0.3):
                got.append((record.key.decode(), record.value, dict(record.headers)["n"]))
    assert sorted(got) == sorted((k, v, v) for k, v in sent)
    for key in {k for k, _ in sent}:  # one key, one partition: its records in the order sent
        assert [v for k, v, _ in got if k == key] == [v for k, v in sent if k == key]


async def test_a_group_splits_partitions_and_resumes_from_its_commit(parity_topics: Settings) -> None:
    topic = parity_topics.topic("tasks")
    async with RecordProducer(parity_topics) as producer:
        for i in range(20):
            await producer.send(topic, f"t{i}".encode(), key=f"ro-{i}")
    group = f"{parity_topics.topic_prefix}-parity"
    first = RecordConsumer(parity_topics, [topic], group_id=group)
    await first.start()
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 40
        while len(seen) < 10 and time.monotonic() < deadline:
            records = await first.getmany(0.3, max_records=10 - len(seen))
            seen += [r.value for r in records]
            first.done_many(records)
    finally:
        await first.stop()  # commits what is done
    second = RecordConsumer(parity_topics, [topic], group_id=group)
    await second.start()
    rest: list[bytes] = []
    try:
        deadline = time.monotonic() + 40
        while len(seen) + len(rest) < 20 and time.monotonic() < deadline:
            rest += [r.value for r in await second.getmany(0.3)]
    finally:
        await second.stop()
    assert sorted(seen + rest) == sorted(f"t{i}".encode() for i in range(20)), "each record once across the two"


async def test_the_fallback_broker_is_told_apart_from_kafka(parity_broker: tuple[BrokerKind, str], parity_topics: Settings) -> None:
    """Tansu's workarounds (the state machine's changelog catch-up, a shorter fetch wait) run only on Tansu."""
    kind, _ = parity_broker
    assert await is_tansu(parity_topics) == (kind == "tansu")


async def test_a_latency_critical_consumer_waits_as_long_as_its_broker_allows(
    parity_broker: tuple[BrokerKind, str], parity_topics: Settings
) -> None:
    """Tansu answers a waiting fetch only when the wait runs out, so a hop something waits on fetches every 100 ms
    there; Apache Kafka answers as soon as a record arrives, so its idle consumers may wait 500 ms between fetches.
    An explicit AGL_KAFKA_HOP_FETCH_WAIT_MS wins on either; a consumer not latency-critical keeps its own wait."""
    kind, _ = parity_broker
    expected = LOW_LATENCY_FETCH_WAIT_MS if kind == "tansu" else KAFKA_HOP_FETCH_WAIT_MS
    topic = parity_topics.topic("rollouts")
    async with RecordConsumer(parity_topics, [topic], group_id=None, latency_critical=True) as hop:
        assert hop.fetch_max_wait_ms == expected
        async with RecordProducer(parity_topics) as producer:  # and the record still arrives
            await producer.send_and_wait(topic, SAMPLES[RolloutSnapshot], key="r-1", partition=0)
        got: list = []
        for _ in range(50):
            got += (await hop.get_decoded(RolloutSnapshot, timeout=0.2))[0]
            if got:
                break
        assert [g.key for g in got] == ["r-1"]
    assert await hop_fetch_wait_ms(parity_topics.with_values(kafka_hop_fetch_wait_ms=250)) == 250
    async with RecordConsumer(parity_topics, [topic], group_id=None, fetch_max_wait_ms=1234) as plain:
        assert plain.fetch_max_wait_ms == 1234


async def test_compacted_topic_reads_as_the_latest_value_per_key(parity_topics: Settings) -> None:
    topic = parity_topics.topic("rollouts")
    async with RecordProducer(parity_topics) as producer:
        for i in range(30):
            await producer.send(topic, f"v{i}".encode(), key=f"ro-{i % 5}", partition=0)
        await producer.send(topic, None, key="ro-0", partition=0)  # a tombstone
    latest = await read_to_end(parity_topics, topic, [0])
    assert latest == {b"ro-0": None, **{f"ro-{k}".encode(): f"v{25 + k}".encode() for k in range(1, 5)}}


async def test_pipeline_end_to_end_exactly_once(parity_broker: tuple[BrokerKind, str]) -> None:
    """The workload through runners, processors and ClickHouse on this kind of broker: every rollout once."""
    kind, _ = parity_broker
    workdir = Path(tempfile.mkdtemp(prefix=f"agl-parity-{kind}-"))
    try:
        pipe = await Pipeline(workdir, kind=kind).start()
        try:
            pipe.start_runner(concurrency=4)
            assert pipe.settings is not None
            from agl_stream.client import StoreClient

            async with StoreClient(pipe.settings) as store:
                enq = await enqueue(store, make_tasks(12, seed=12, sleep=0.02, prefix=f"parity-{kind}"), batch=12)
                done = await store.wait_for_rollouts(rollout_ids=list(enq.tasks), timeout=180)
                assert len(done) == 12
            await pipe.wait_drained()
            await asyncio.to_thread(pipe.stop_runners)
            await asyncio.to_thread(pipe.stop_processors)
            result = audit(pipe.settings.effective_clickhouse_dsn, enq)
        finally:
            await pipe.stop()
        report(result.line(f"parity-{kind}"))
        assert_exactly_once(result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
