"""The local topic profile and the trimmer: records go once every consumer group committed past them (Apache Kafka)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndMetadata

from agl_stream import Settings
from agl_stream.broker import choose_local_broker
from agl_stream.kafka import connection_options
from agl_stream_topics.admin import ensure_topics
from agl_stream_topics.catalog import LOCAL_PROFILE, spec
from agl_stream_topics.trim import trim_committed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        bool(os.environ.get("AGL_TEST_KAFKA_BOOTSTRAP")) or choose_local_broker(Settings.from_env()) != "kafka",
        reason="DeleteRecords and topic configs need the local Apache Kafka (Tansu's memory engine has neither)",
    ),
]


def test_local_profile_shortens_segments_and_retention() -> None:
    local = Settings.from_env(env={"AGL_TOPIC_PROFILE": "local"})
    spans = spec("spans").config(local)
    assert spans["segment.bytes"] == LOCAL_PROFILE["delete"]["segment.bytes"]
    assert int(spans["retention.ms"]) == 24 * 3600 * 1000
    assert spec("rollouts").config(local)["min.cleanable.dirty.ratio"] == "0.1"
    assert "segment.bytes" not in spec("spans").config(Settings.from_env(env={})), "a cluster keeps the catalog's settings"


async def _configs(settings: Settings, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(**connection_options(settings))
    await admin.start()
    try:
        (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        return {entry[0]: entry[1] for entry in response.resources[0][4]}
    finally:
        await admin.close()


async def test_trim_stops_at_the_lowest_commit_of_any_group(settings: Settings) -> None:
    local = settings.model_copy(update={"topic_profile": "local"})
    await ensure_topics(local, strict=True)
    topic = local.topic("spans")
    assert (await _configs(local, topic))["segment.bytes"] == LOCAL_PROFILE["delete"]["segment.bytes"]
    producer = AIOKafkaProducer(**connection_options(local))
    await producer.start()
    try:
        for i in range(30):
            await producer.send(topic, f"r{i}".encode(), partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)

    async def commit(group: str, offset: int) -> None:
        consumer = AIOKafkaConsumer(**connection_options(local), group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: OffsetAndMetadata(offset, "")})
        finally:
            await consumer.stop()

    await commit(f"{local.topic_prefix}-sinks-test", 25)
    await commit(f"{local.topic_prefix}-triplets-test", 10)
    assert await trim_committed(local, min_age=3600) == [], "nothing younger than min_age goes"
    (trimmed,) = await trim_committed(local, min_age=0)
    assert (trimmed.partition, trimmed.before, trimmed.after, trimmed.groups) == (tp, 0, 10, 2)
    reader = AIOKafkaConsumer(**connection_options(local), group_id=None)
    await reader.start()
    try:
        assert (await reader.beginning_offsets([tp]))[tp] == 10
        other = TopicPartition(topic, 1)
        assert (await reader.beginning_offsets([other]))[other] == 0, "a partition no group committed on stays"
    finally:
        await reader.stop()
    await commit(f"{local.topic_prefix}-triplets-test", 30)
    (again,) = await trim_committed(local, min_age=0)
    assert again.after == 25, "the slowest group bounds it"


def test_trim_command_runs_one_pass(settings: Settings) -> None:
    env = {**os.environ, "AGL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "", "AGL_TOPIC_PREFIX": settings.topic_prefix}
    done = subprocess.run([sys.executable, "-m", "agl_stream.cli.main", "topics", "trim", "--min-age", "0"],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "nothing to trim" in done.stdout
