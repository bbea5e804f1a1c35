"""The span feed of a front door: read-your-writes across replicas, and ClickHouse for what it does not hold.

Two store clients stand for two front-door replicas: ``a`` writes spans (acknowledged by the broker), ``b`` answers
``query_spans`` from its feed of ``agl.spans``. Each query at ``b`` right after a write at ``a`` must see it: ``b``
reads the partitions' end offsets after the query arrives and waits until its feed has read that far.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agl_stream.client import StoreClient
from agl_stream.client.span_feed import SpanFeed
from agl_stream.config import Settings
from agl_stream.types import Span
from tests.agl_stream.client.pipeline import processors, store_with_pipeline

pytestmark = pytest.mark.integration


def a_span(rollout_id: str, attempt_id: str, seq: int) -> Span:
    now = time.time()
    return Span(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=seq, trace_id="a" * 32, span_id=f"{seq:016x}",
                name=f"step-{seq}", start_time=now, end_time=now)  # fmt: skip


async def test_a_span_acknowledged_at_one_replica_is_read_at_the_other_right_away(topics: Settings) -> None:
    async with processors(topics):
        async with StoreClient(topics) as a, StoreClient(topics, span_feed=SpanFeed(topics, margin=0.0)) as b:  # one clock
            task = await a.start_rollout({"q": 1}, worker_id="Worker-a")
            assert await b.wait_until_known(task.rollout_id, task.attempt.attempt_id, timeout=30)
            for seq in range(1, 21):
                await a.add_span(a_span(task.rollout_id, task.attempt.attempt_id, seq))
                seen = await b.query_spans(task.rollout_id, task.attempt.attempt_id)
                assert [s.sequence_id for s in seen] == list(range(1, seq + 1)), f"after write {seq}"
            assert b.span_reads == {"recent": 20}
            assert b.span_feed is not None and b.span_feed.spans.rollouts == 1 and b.span_feed.records == 20


async def test_a_query_does_not_wait_behind_the_feeds_idle_fetch(topics: Settings) -> None:
    """A broker answers one request per connection at a time: the end offsets a query waits for must not queue
    behind the feed's fetch, which waits up to ``fetch_max_wait_ms`` for data on an idle topic (here 15 s). Behind
    it, a query would find no end offsets within its 5 s and answer False."""
    feed = SpanFeed(topics, margin=0.0, fetch_max_wait_ms=15_000)
    async with StoreClient(topics, span_feed=feed) as b:
        assert b.span_feed is feed
        await asyncio.sleep(1.0)  # the feed's first fetch is in flight, waiting for data that does not come
        for query in range(3):
            assert await feed.caught_up_to_now(timeout=5), f"query {query} waited behind the feed's fetch"


async def test_a_rollout_from_before_the_feed_began_is_read_from_clickhouse(topics: Settings) -> None:
    async with store_with_pipeline(topics) as writer:
        task = await writer.start_rollout({"q": 1}, worker_id="Worker-a")
        await writer.add_span(a_span(task.rollout_id, task.attempt.attempt_id, 1))
        await writer.update_attempt(task.rollout_id, task.attempt.attempt_id, status="succeeded")
        (done,) = await writer.wait_for_rollouts(rollout_ids=[task.rollout_id], timeout=30)
        assert done.status == "succeeded"
        feed = SpanFeed(topics)  # begins now: the rollout was enqueued before, so the feed may not hold it whole
        async with StoreClient(topics, span_reader=writer._span_reader, span_feed=feed) as late:  # noqa: SLF001 - the test's reader
            assert await late.wait_until_known(task.rollout_id, timeout=30)
            seen = await late.query_spans(task.rollout_id)
            assert [s.name for s in seen] == ["step-1"]
            assert late.span_reads == {"clickhouse": 1}  # the feed does not hold it whole


async def test_a_feed_that_does_not_read_every_partition_answers_for_nothing_until_it_does(settings: Settings) -> None:
    """Started before its topic existed (no partitions to read), the feed must not claim to hold every acknowledged
    span: it answers only once it reads every partition, and only for what came after that."""
    from agl_stream.kafka import RecordProducer
    from agl_stream_topics.admin import ensure_topics

    feed = SpanFeed(settings, margin=0.0)
    await feed.start()  # the topic does not exist yet: nothing assigned
    try:
        assert not await feed.caught_up_to_now(timeout=1.0)
        assert (await ensure_topics(settings, strict=True)).ok
        deadline = time.monotonic() + 30
        while not await feed.caught_up_to_now(timeout=1.0):
            assert time.monotonic() < deadline, "the feed never took up the topic's partitions"
            await asyncio.sleep(0.2)  # a refusal answers at once: let the feed's loop run
        assert time.time() > feed.spans.covered_from  # it covers what comes next
        async with RecordProducer(settings) as producer:
            await producer.send_and_wait(settings.topic("spans"), a_span("ro-feed", "at-feed", 1), key="ro-feed")
        assert await feed.caught_up_to_now(timeout=10.0)
        assert [s.sequence_id for s in feed.spans.spans("ro-feed")] == [1]
    finally:
        await feed.stop()


async def test_the_coverage_starts_when_the_partitions_ends_are_known(topics: Settings) -> None:
    """A slow answer to "where do the partitions end" must not cover rollouts whose spans were written while it was
    on its way (they are below the ends the feed starts from)."""
    feed = SpanFeed(topics, margin=0.0)
    raw = feed._consumer.raw  # noqa: SLF001 - the test slows the feed's own call down
    real_end_offsets = raw.end_offsets
    answered: list[float] = []

    async def slow_end_offsets(partitions):  # type: ignore[no-untyped-def]
        await asyncio.sleep(1.0)
        ends = await real_end_offsets(partitions)
        answered.append(time.time())
        return ends

    raw.end_offsets = slow_end_offsets  # type: ignore[method-assign]
    await feed.start()
    try:
        assert answered and feed.spans.began_at >= answered[0]
    finally:
        await feed.stop()
