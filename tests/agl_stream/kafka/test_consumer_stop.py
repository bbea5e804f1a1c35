"""Stopping a consumer while one of its fetches waits to be retried (aiokafka 0.14's fetcher close).

At the end of a 20,000-rollout soak a follower's fetch had timed out (``RequestTimedOutError``) and
was sleeping before its retry when the follower stopped: aiokafka's ``stop()`` raised the fetch task's
``CancelledError`` and left the client's connections open. A real consumer on the real broker, with
such a pending fetch task in its fetcher, shows both the failure and the fix.
"""

from __future__ import annotations

import asyncio

import pytest

from agl_stream import Settings
from agl_stream.kafka import RecordConsumer


def _pending_retry(consumer: RecordConsumer) -> asyncio.Task[None]:
    """A fetch task of the fetcher's, asleep before its retry (as aiokafka's after a failed fetch)."""
    fetcher = consumer.raw._fetcher
    task = asyncio.create_task(asyncio.sleep(30))
    fetcher._pending_tasks.add(task)
    return task


async def test_plain_aiokafka_stop_leaks_the_fetch_tasks_cancellation(topics: Settings) -> None:
    consumer = RecordConsumer(topics, [topics.topic("spans")], group_id=None)
    await consumer.start()
    _pending_retry(consumer)
    with pytest.raises(asyncio.CancelledError):
        await consumer.raw.stop()  # the behaviour worked around: if aiokafka fixes it, this test says so
    await consumer.raw._client.close()


async def test_stop_closes_the_consumer_and_returns(topics: Settings) -> None:
    consumer = RecordConsumer(topics, [topics.topic("spans")], group_id=None)
    await consumer.start()
    pending = _pending_retry(consumer)
    await consumer.stop(commit=False)
    assert pending.cancelled()
    assert not any(conn.connected() for conn in consumer.raw._client._conns.values())  # every connection closed
