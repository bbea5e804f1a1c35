"""The Kafka export path against a real broker: keyed, co-partitioned, oversized spans truncated not lost."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.partitioner import DefaultPartitioner

from agl_stream.config import Settings
from agl_stream.emitter import emit_message
from agl_stream.kafka import RecordConsumer
from agl_stream.tracer import create_tracer
from agl_stream.tracer.sizing import TRUNCATED_ATTRIBUTE
from agl_stream.types import Span

pytestmark = pytest.mark.integration


async def test_spans_are_keyed_by_rollout_and_oversized_ones_truncated(topics: Settings) -> None:
    tracer = create_tracer(topics)
    await asyncio.to_thread(tracer.init)
    try:
        with tracer.attempt_scope(rollout_id="ro-00000000big0", attempt_id="at-0000big0"):
            emit_message("small")
            emit_message("y" * 3_000_000)  # three times Kafka's default message limit
        await asyncio.to_thread(tracer.pipeline.flush, 60)
    finally:
        await asyncio.to_thread(tracer.teardown)
    consumer = RecordConsumer(topics, [topics.topic("spans")], group_id=None)
    await consumer.start()
    try:
        records = []
        for _ in range(30):
            good, bad = await consumer.get_decoded(Span, timeout=0.3)
            assert not bad
            records.extend(good)
            if len(records) >= 2:
                break
    finally:
        await consumer.stop(commit=False)
    assert len(records) == 2
    expected_partition = DefaultPartitioner()(b"ro-00000000big0", [0, 1], [0, 1])
    assert {r.record.partition for r in records} == {expected_partition}
    assert {r.key for r in records} == {"ro-00000000big0"}
    small, big = sorted((r.value for r in records), key=lambda s: s.sequence_id)
    assert small.attributes["agentlightning.message.body"] == "small"
    body = big.attributes["agentlightning.message.body"]
    assert len(body) < 1024 * 1024 and body.endswith("chars]") and "truncated" in body
    assert big.attributes[TRUNCATED_ATTRIBUTE] == ["agentlightning.message.body"]
