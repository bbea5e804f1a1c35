"""Producer and consumer wrappers against the real local broker."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import TopicPartition

from agl_stream import Settings, Span
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.serialization import SCHEMAS
from tests.agl_stream.samples import SAMPLES
from agl_stream_topics.catalog import CATALOG

pytestmark = pytest.mark.integration


async def _drain(consumer: RecordConsumer, want: int, model: type, timeout: float = 30.0) -> tuple[list, list]:
    good, bad = [], []
    deadline = time.monotonic() + timeout
    while len(good) + len(bad) < want and time.monotonic() < deadline:
        g, b = await consumer.get_decoded(model, timeout=0.3)
        good += g
        bad += b
    return good, bad


async def test_every_model_round_trips_through_its_topic(topics: Settings) -> None:
    by_model = {spec.value_model: spec for spec in CATALOG}
    async with RecordProducer(topics) as producer:
        for model, record in SAMPLES.items():
            spec = by_model.get(model)
            if spec is None:  # RolloutControl rides on agl.attempts
                continue
            await producer.send_and_wait(spec.name(topics), record, key="k-" + model.__name__, headers={"agl-test": "1"})
    for model, spec in by_model.items():
        async with RecordConsumer(topics, [spec.name(topics)], group_id=None) as consumer:
            good, bad = await _drain(consumer, 1, model)
        assert not bad and [g.value for g in good] == [SAMPLES[model]], model.__name__
        assert good[0].key == "k-" + model.__name__ and good[0].headers["agl-test"] == b"1"
    assert set(by_model) | {type(SAMPLES[m]) for m in SAMPLES} >= set(SCHEMAS)


async def test_corrupt_and_unknown_version_records_are_rejected_not_fatal(topics: Settings) -> None:
    topic = topics.topic("spans")
    span = SAMPLES[Span]
    async with RecordProducer(topics) as producer:
        await producer.send_and_wait(topic, span, key=span.rollout_id, partition=0)
        await producer.send_and_wait(topic, b"\x00\x01 definitely not json", key=span.rollout_id, partition=0)
        await producer.send_and_wait(topic, b'{"schema":"span","v":7,"data":{}}', key=span.rollout_id, partition=0)
        await producer.send_and_wait(topic, span, key=span.rollout_id, partition=0)
    async with RecordConsumer(topics, [topic], group_id=None) as consumer:
        good, bad = await _drain(consumer, 4, Span)
    assert [g.value for g in good] == [span, span]
    reasons = [b.error.reason for b in bad]
    assert any("not valid JSON" in r for r in reasons) and any("unsupported schema version 7" in r for r in reasons)
    assert all(b.error.raw == b.record.value for b in bad)


async def test_two_consumers_in_a_group_split_partitions(topics: Settings) -> None:
    topic = topics.topic("tasks")
    first = RecordConsumer(topics, [topic], group_id="split")
    second = RecordConsumer(topics, [topic], group_id="split")
    await first.start()
    await second.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            await asyncio.gather(first.getmany(0.2), second.getmany(0.2))
            a, b = first.raw.assignment(), second.raw.assignment()
            if a and b and not (a & b) and len(a | b) == topics.partitions:
                break
        assert a and b, f"assignment did not split: {a} / {b}"
        assert not (a & b) and {tp.partition for tp in a | b} == set(range(topics.partitions))
    finally:
        await asyncio.gather(first.stop(), second.stop())


async def test_ownership_token_changes_when_a_rebalance_revokes_the_partition(topics: Settings) -> None:
    """A runner holding a task across awaits must notice a revocation even if the partition came back."""
    from aiokafka.structs import ConsumerRecord

    topic = topics.topic("tasks")
    first = RecordConsumer(topics, [topic], group_id="ownership")
    await first.start()
    second = RecordConsumer(topics, [topic], group_id="ownership")
    try:
        deadline = time.monotonic() + 40
        while not first.raw.assignment() and time.monotonic() < deadline:
            await first.getmany(0.2)
        tp = sorted(first.raw.assignment())[0]
        record = ConsumerRecord(tp.topic, tp.partition, 0, 0, 0, None, None, None, None, 0, [])
        before = first.ownership(record)
        assert before is not None
        await second.start()  # joins the group: the first consumer's partitions are revoked, then reassigned
        while time.monotonic() < deadline and not second.raw.assignment():
            await asyncio.gather(first.getmany(0.2), second.getmany(0.2))
        assert second.raw.assignment(), "the second consumer never got partitions"
        assert first.ownership(record) != before
    finally:
        await asyncio.gather(first.stop(), second.stop())


async def test_a_claim_whose_commit_failed_holds_when_the_rebalance_commits_it(topics: Settings) -> None:
    """The broker is down while a runner commits its claim; the rebalance after the outage commits it on
    revoke. The claim then holds (its runner runs the task) and the record is redelivered to nobody.

    Seen in CI on Apache Kafka before the fix: the claim gave the task up to a "new owner" that
    started past it, and the rollout stayed ``preparing`` forever."""
    from aiokafka.errors import KafkaConnectionError

    from agl_stream.kafka.claim import claim_record

    topic = topics.topic("tasks")
    async with RecordProducer(topics) as producer:
        await producer.send_and_wait(topic, b"task", key="t", partition=0)
    first = RecordConsumer(topics, [topic], group_id="claim-on-revoke")
    await first.start()
    second = RecordConsumer(topics, [topic], group_id="claim-on-revoke")
    try:
        deadline = time.monotonic() + 40
        got: list = []
        while not got and time.monotonic() < deadline:
            got = await first.getmany(0.3)
        assert got and got[0].value == b"task"
        record = got[0]
        reported: list[str] = []

        async def report_started() -> None:
            reported.append("started")

        async def commit_while_the_broker_is_down() -> None:
            raise KafkaConnectionError("the broker is down (simulated for this commit only)")

        claim = asyncio.create_task(claim_record(first, record, report_started, commit_while_the_broker_is_down, "t",
                                                first.ownership(record)))
        await second.start()  # the group rebalances: the first consumer commits what is done, then gives up its partitions
        redelivered: list = []
        while not claim.done() and time.monotonic() < deadline:
            redelivered += [r for r in await second.getmany(0.2) if r.value == b"task"]
        assert await asyncio.wait_for(claim, 5), "the claim was given up although the rebalance committed it"
        assert reported == ["started"]
        settle = time.monotonic() + 5
        while time.monotonic() < settle:  # both members read on: nobody may get the task again
            for consumer in (first, second):
                redelivered += [r for r in await consumer.getmany(0.2) if r.value == b"task"]
        assert not redelivered, "the claimed task was delivered again"
        assert await first.raw.committed(TopicPartition(topic, 0)) == 1 or await second.raw.committed(TopicPartition(topic, 0)) == 1
    finally:
        await asyncio.gather(first.stop(), second.stop())


@pytest.mark.parametrize("landed", [True, False], ids=["commit-landed", "commit-lost"])
async def test_a_claim_whose_commit_answer_was_lost_is_settled_by_the_groups_committed_offset(
    topics: Settings, landed: bool
) -> None:
    """A claim's commit fails as far as its runner knows (the answer lost; it may have landed), and so does the
    commit on revoke of the rebalance that takes the partition. The claim must hold exactly when the commit
    landed: then nobody else is given the task; otherwise its partition's next owner is.

    Before the fix the claim was given up in both cases: with the commit landed, nobody ran the task and the
    rollout stayed ``preparing`` (seen after broker SIGKILLs in the chaos scenarios)."""
    from aiokafka.errors import KafkaConnectionError
    from aiokafka.structs import OffsetAndMetadata

    from agl_stream.broker import choose_local_broker
    from agl_stream.kafka.claim import claim_record

    if landed and choose_local_broker() != "kafka":
        pytest.skip("Tansu answers OffsetFetch without the commit's metadata: a claim in doubt stays given up there")
    topic = topics.topic("tasks")
    async with RecordProducer(topics) as producer:
        for value in (b"earlier", b"task"):
            await producer.send_and_wait(topic, value, key="t", partition=0)
    group = f"claim-in-doubt-{landed}"
    first = RecordConsumer(topics, [topic], group_id=group, claims=True)
    await first.start()
    second = RecordConsumer(topics, [topic], group_id=group, claims=True)
    try:
        deadline = time.monotonic() + 60
        got: list = []
        while len(got) < 2 and time.monotonic() < deadline:
            got += await first.getmany(0.3)
        earlier, record = got[0], got[1]
        assert record.value == b"task"

        async def report_started() -> None:
            pass

        # the earlier task is claimed cleanly: the group's committed offset (with its metadata) stops at the task
        assert await claim_record(first, earlier, report_started, first.commit, "earlier", first.ownership(earlier))
        tp = TopicPartition(topic, 0)

        async def commit_with_the_answer_lost() -> None:
            if landed:  # reaches the coordinator; the runner never hears back
                await first.raw.commit({tp: OffsetAndMetadata(record.offset + 1, first.commit_metadata(tp))})
            raise KafkaConnectionError("the answer was lost (simulated)")

        async def revoke_commit_fails() -> None:
            raise KafkaConnectionError("the broker is down (simulated for the commit on revoke)")

        first.committer = revoke_commit_fails
        claim = asyncio.create_task(claim_record(first, record, report_started, commit_with_the_answer_lost, "t",
                                                 first.ownership(record)))  # fmt: skip
        await asyncio.sleep(0.5)  # the claim is retrying its commit
        await second.start()  # the group rebalances
        redelivered: list = []
        while not claim.done() and time.monotonic() < deadline:
            for consumer in (first, second):
                redelivered += [r for r in await consumer.getmany(0.2) if r.value == b"task"]
        assert claim.done(), "the claim never settled"
        assert claim.result() is landed
        settle = time.monotonic() + 5
        while time.monotonic() < settle and not (redelivered and not landed):
            for consumer in (first, second):
                redelivered += [r for r in await consumer.getmany(0.2) if r.value == b"task"]
        if landed:
            assert not redelivered, "the task was delivered again although its claim held"
        else:
            assert redelivered, "the task whose claim was given up reached nobody"
    finally:
        first.committer = None
        await asyncio.gather(first.stop(), second.stop())


async def test_a_record_fetched_before_its_partition_moved_away_and_back_cannot_be_claimed(topics: Settings) -> None:
    """A stale copy of a task (fetched in an earlier tenure) must not be claimed: its partition's new
    tenure redelivers the record from the committed offset, and only that delivery may run it."""
    from agl_stream.kafka.claim import claim_record

    topic = topics.topic("tasks")
    async with RecordProducer(topics) as producer:
        await producer.send_and_wait(topic, b"task", key="t", partition=0)
    first = RecordConsumer(topics, [topic], group_id="stale-claim")
    await first.start()
    try:
        deadline = time.monotonic() + 40
        got: list = []
        while not got and time.monotonic() < deadline:
            got = await first.getmany(0.3)
        stale, tenure = got[0], first.ownership(got[0])
        second = RecordConsumer(topics, [topic], group_id="stale-claim")
        await second.start()  # the partitions move (eager rebalance: every one is revoked first)
        while first.ownership(stale) == tenure and time.monotonic() < deadline:
            await asyncio.gather(first.getmany(0.2), second.getmany(0.2))
        await second.stop()  # and come back to the first consumer
        redelivered: list = []
        while first.ownership(stale) is None and time.monotonic() < deadline:
            redelivered += await first.getmany(0.2)
        assert first.ownership(stale) not in (None, tenure)
        reported: list[str] = []

        async def report_started() -> None:
            reported.append("started")

        assert not await claim_record(first, stale, report_started, first.commit, "t", tenure)
        assert reported == [], "a stale copy reported started"
        while not redelivered and time.monotonic() < deadline:
            redelivered += await first.getmany(0.2)
        fresh = redelivered[0]
        assert fresh.value == b"task" and fresh.offset == stale.offset
        assert await claim_record(first, fresh, report_started, first.commit, "t", first.ownership(fresh))
        assert reported == ["started"]
    finally:
        await first.stop()


async def test_committed_offsets_survive_a_consumer_restart(topics: Settings) -> None:
    topic = topics.topic("attempts")
    raw = [f"rec-{i}".encode() for i in range(10)]
    async with RecordProducer(topics) as producer:
        for i, value in enumerate(raw):
            await producer.send(topic, value, key=str(i), partition=0)
        await producer.flush()

    async def read(n: int, mark_done: int) -> list[bytes]:
        consumer = RecordConsumer(topics, [topic], group_id="restart", max_poll_records=n)
        await consumer.start()
        got: list = []
        deadline = time.monotonic() + 40
        while len(got) < n and time.monotonic() < deadline:
            got += await consumer.getmany(0.3, max_records=n - len(got))
        consumer.done_many(got[:mark_done])
        await consumer.stop()  # commits only what is done
        return [r.value for r in got]

    first = await read(6, mark_done=4)  # 6 delivered, only 4 finished
    assert first == raw[:6]
    second = await read(6, mark_done=6)
    assert second == raw[4:10], "records 4 and 5 were not done, so they must be redelivered"


async def test_producer_backpressure_bounds_in_flight_records(settings: Settings) -> None:
    """With the broker unreachable, send() blocks once max_in_flight records are outstanding."""
    from agl_stream.broker import local_broker

    broker = local_broker().start()
    local = settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
    producer = RecordProducer(local, max_in_flight=5, delivery_timeout=60)
    await producer.start()
    try:
        broker.kill()
        sent = 0

        async def fill() -> None:
            nonlocal sent
            while True:
                await producer.send("agl.backpressure", b"x" * 100, key="k")
                sent += 1

        task = asyncio.create_task(fill())
        await asyncio.sleep(2.0)
        assert sent <= 5 and producer.in_flight <= 5
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        producer._started = False  # the broker is gone: skip the final flush
        await producer._producer.stop()
        broker.stop()  # the killed broker's files
