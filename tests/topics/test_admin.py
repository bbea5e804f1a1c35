"""Topic creation is idempotent and mismatching topics are reported."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from agl_stream import Settings
from agl_stream.kafka import connection_options
from agl_stream_topics.admin import TopicMismatchError, describe_topics, ensure_topics
from agl_stream_topics.catalog import CATALOG, spec

pytestmark = pytest.mark.integration


async def test_create_is_idempotent(settings: Settings) -> None:
    first = await ensure_topics(settings)
    assert first.ok and sorted(first.created) == sorted(s.name(settings) for s in CATALOG)
    second = await ensure_topics(settings)
    assert second.ok and second.created == []
    states = {s.name: s for s in await describe_topics(settings)}
    assert states[settings.topic("spans")].partitions == settings.partitions
    assert states[settings.topic("rollouts")].cleanup_policy == "compact"
    assert states[settings.topic("resources")].partitions == 1


async def test_mismatched_existing_topics_are_reported(settings: Settings) -> None:
    admin = AIOKafkaAdminClient(**connection_options(settings))
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(settings.topic("spans"), num_partitions=settings.partitions + 1, replication_factor=1),
                NewTopic(settings.topic("rollouts"), num_partitions=settings.partitions, replication_factor=1,
                         topic_configs={"cleanup.policy": "delete"}),
            ]
        )  # fmt: skip
    finally:
        await admin.close()
    report = await ensure_topics(settings)
    assert not report.ok
    problems = "\n".join(report.problems)
    assert f"has {settings.partitions + 1} partitions, catalog expects {settings.partitions}" in problems
    assert "cleanup.policy is 'delete', catalog expects 'compact'" in problems
    with pytest.raises(TopicMismatchError):
        await ensure_topics(settings, strict=True)


async def test_topics_with_fewer_replicas_than_asked_for_are_reported(settings: Settings) -> None:
    """The three-node cluster's services once created every topic with one replica (the local stack did not pass
    AGL_REPLICATION_FACTOR to ``topics create``): a node's death took its partitions away until it came back."""
    assert (await ensure_topics(settings)).ok  # one replica each: this test's broker has one node
    asked = settings.model_copy(update={"replication_factor": 3})
    report = await ensure_topics(asked)
    assert not report.ok
    assert f"{settings.topic('spans')}: has 1 replicas per partition, AGL_REPLICATION_FACTOR asks for 3" in report.problems
    with pytest.raises(TopicMismatchError):
        await ensure_topics(asked, strict=True)


def test_catalog_matches_design() -> None:
    assert [s.short_name for s in CATALOG] == [
        "tasks", "attempts", "rollouts", "spans", "triplets", "resources", "workers", "dlq", "training_steps", "training_runs", "datasets"
    ]  # fmt: skip
    assert spec("rollouts").cleanup_policy == spec("resources").cleanup_policy == spec("workers").cleanup_policy == "compact"
    with pytest.raises(KeyError, match="unknown topic"):
        spec("nope")
