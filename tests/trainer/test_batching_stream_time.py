"""A group's straggler timeout counts in stream time, on the real broker.

Seed 303 of the nemesis (20,000 rollouts): the learner, 20 minutes behind and cut off for a while from
the broker that led some partitions, timed groups out on its own clock and trained 83 of them with 3
members of 4; each fourth member sat unread in a partition it could not fetch, then arrived alone and
was dropped. Cut off from one partition here (paused, as from its broker), the group waits instead.
"""

from __future__ import annotations

import time

from aiokafka import TopicPartition

from agl_stream import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream_trainer.batching import BatcherConfig, TripletBatcher, wait_for_assignment

from .conftest import make_group

TIMEOUT_S = 1.0


def _config() -> BatcherConfig:
    return BatcherConfig(group_size=4, batch_groups=1, min_group_size=2, max_staleness=None, group_timeout_s=TIMEOUT_S)


async def test_a_group_waits_for_a_member_in_a_partition_it_cannot_read(topics: Settings) -> None:
    topic = topics.topic("triplets")
    members = make_group("g-cut", [1.0, 0.0, 1.0, 0.0], seed=5)
    async with RecordConsumer(topics, [topic], "learner-stream-time") as consumer, RecordProducer(topics) as producer:
        await wait_for_assignment(consumer)
        batcher = TripletBatcher(consumer, _config())
        cut = TopicPartition(topic, 1)
        await batcher.next_batch(0, timeout=0.5)  # a first fetch of both partitions
        consumer.raw.pause(cut)
        for member in members[:3]:
            await producer.send_and_wait(topic, member, key=member.rollout_id, partition=0)
        await producer.send_and_wait(topic, members[3], key=members[3].rollout_id, partition=1)

        # three times the timeout on the learner's clock: the group stays, its fourth member is still unread
        assert await batcher.next_batch(0, timeout=3 * TIMEOUT_S) is None
        assert batcher.stats.trajectories == 3 and batcher.stats.timed_out_groups == 0

        consumer.raw.resume(cut)
        batch = await batcher.next_batch(0, timeout=30)
        assert batch is not None and len(batch.trajectories) == 4
        assert batcher.stats.timed_out_groups == 0 and batcher.stats.dropped_groups == 0


async def test_a_straggler_still_times_out_once_every_partition_is_read_past_it(topics: Settings) -> None:
    topic = topics.topic("triplets")
    members = make_group("g-straggler", [1.0, 0.0, 1.0, 0.0], seed=6)[:3]  # the fourth never comes
    async with RecordConsumer(topics, [topic], "learner-stream-time") as consumer, RecordProducer(topics) as producer:
        await wait_for_assignment(consumer)
        batcher = TripletBatcher(consumer, _config())
        written = time.time()
        for member in members:
            await producer.send_and_wait(topic, member, key=member.rollout_id)
        batch = await batcher.next_batch(0, timeout=30)
        assert batch is not None and len(batch.trajectories) == 3 and batcher.stats.timed_out_groups == 1
        assert time.time() - written >= TIMEOUT_S
