"""Sinks against a real broker and a real ClickHouse engine: rows land once, bad records become dead letters."""

from __future__ import annotations

import asyncio
import json

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.serialization import encode
from agl_stream.types import DeadLetter, LLM, ResourcesUpdate, Span, Worker
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.sinks import SinkOptions, SinkService, run_sinks
from tests.processors.clickhouse.store import make_attempt_events, make_snapshot, make_span, make_trajectory

FAST = SinkOptions(batch_size=500, max_wait=0.2, poll_timeout=0.2)


async def _produce(settings: Settings, topic: str, records: list[tuple[str, object]]) -> None:
    async with RecordProducer(settings) as producer:
        await producer.send_many(settings.topic(topic), records)  # type: ignore[arg-type]


async def test_every_topic_lands_in_its_table(topics: Settings, ch: ClickHouse) -> None:
    settings = topics
    rollouts = [f"ro-{i:012x}" for i in range(6)]
    await _produce(settings, "spans", [(r, make_span(r, sequence_id=s)) for r in rollouts for s in range(1, 4)])
    await _produce(settings, "triplets", [(r, make_trajectory(r, n=2)) for r in rollouts])
    await _produce(settings, "rollouts", [(r, make_snapshot(r)) for r in rollouts])
    await _produce(settings, "attempts", [(r, e) for r in rollouts for e in make_attempt_events(r)])
    llm = LLM(endpoint="http://x/v1", model="m", policy_version=4)
    await _produce(settings, "resources", [("rs-1", ResourcesUpdate(resources_id="rs-1", resources={"main_llm": llm}, version=1))])
    await _produce(settings, "workers", [("w-1", Worker(worker_id="w-1", status="busy", last_heartbeat_time=1_700_000_000.0))])
    letter = DeadLetter(source_topic="agl.spans", partition=0, offset=5, payload=b"\x00bad", reason="not JSON", processor="x")
    await _produce(settings, "dlq", [("k", letter)])

    stats = await run_sinks(settings, ch=ch, options=FAST, idle_exit=1.0)

    assert {name: s.dead_letters for name, s in stats.items()} == {name: 0 for name in stats}
    assert ch.scalar("SELECT count() FROM spans FINAL") == 18
    assert ch.scalar("SELECT count() FROM triplets FINAL") == 12
    assert ch.scalar("SELECT count() FROM rollouts FINAL") == 6
    assert ch.scalar("SELECT count() FROM attempts FINAL") == 12
    assert ch.query_rows("SELECT ResourcesId, Version, PolicyVersion, ResourceNames FROM resources FINAL")[1] == [
        ("rs-1", 1, 4, ["main_llm"])
    ]
    assert ch.query_rows("SELECT WorkerId, Status FROM workers FINAL")[1] == [("w-1", "busy")]
    assert ch.query_rows("SELECT SourceTopic, Offset, Payload, Reason FROM dead_letters FINAL")[1] == [
        ("agl.spans", 5, "\x00bad", "not JSON")
    ]
    cols, rows = ch.query_rows(
        "SELECT TripletIndex, PromptTokenIds, ResponseTokenIds, ResponseLogprobs, Reward, FinalReward, PolicyVersion "
        "FROM triplets FINAL WHERE RolloutId = {r:String} ORDER BY TripletIndex",
        {"r": rollouts[0]},
    )
    assert rows == [(0, [1, 2, 3], [7, 8], [-0.5, -0.25], None, 1.0, 3), (1, [1, 2, 4], [7, 8], [-0.5, -0.25], 1.0, 1.0, 3)]


async def test_drain_mode_waits_until_every_record_is_fetched(topics: Settings, ch: ClickHouse) -> None:
    """``idle_exit`` counts from the moment the sinks are assigned and caught up, never from their start.

    Short polls and a tiny idle bound make the race likely: a poll that sees the assignment before
    the first fetch returns nothing, and a sink that called that idle stopped with the topic unread
    (the bug behind a CI failure, where the group join took longer than the idle bound).
    """
    rollouts = [f"ro-{i:012x}" for i in range(40)]
    await _produce(topics, "spans", [(r, make_span(r, sequence_id=s)) for r in rollouts for s in range(1, 6)])
    short_polls = SinkOptions(batch_size=500, max_wait=0.01, poll_timeout=0.01)

    stats = await run_sinks(topics, ["spans"], ch=ch, options=short_polls, idle_exit=0.05)

    assert stats["spans"].records == 200
    assert stats["spans"].caught_up
    assert ch.scalar("SELECT count() FROM spans FINAL") == 200


def _malformed(i: int, good: Span) -> bytes | None:
    """Ten kinds of bad records: undecodable, wrong schema, invalid fields, unstorable values."""
    envelope = json.loads(encode(good))
    kind = i % 10
    if kind == 0:
        return b"\xff\xfe not json"
    if kind == 1:
        return None  # tombstone
    if kind == 2:
        return b'{"schema": "span"}'
    if kind == 3:
        envelope["schema"] = "worker"
    elif kind == 4:
        envelope["v"] = 99
    elif kind == 5:
        envelope["data"]["sequence_id"] = -1
    elif kind == 6:
        del envelope["data"]["trace_id"]
    elif kind == 7:
        envelope["data"]["start_time"] = 20.0
        envelope["data"]["end_time"] = 10.0  # ends before it starts: cannot be stored
    elif kind == 8:
        envelope["data"]["start_time"] = -5.0
    else:
        return b"[1, 2, 3]"
    return json.dumps(envelope).encode()


async def test_malformed_records_interleaved_with_good_ones(topics: Settings, ch: ClickHouse) -> None:
    settings = topics
    records: list[tuple[str, object]] = []
    good_ids = set()
    for i in range(1000):
        rollout = f"ro-{i % 40:012x}"
        good = make_span(rollout, sequence_id=i + 1, span_id=f"{i:016x}")
        good_ids.add(good.span_id)
        records.append((rollout, good))
        records.append((rollout, _malformed(i, make_span(rollout, sequence_id=i + 1, span_id=f"{i + 5000:016x}"))))
    await _produce(settings, "spans", records)

    stats = await run_sinks(settings, ["spans", "dlq"], ch=ch, options=FAST, idle_exit=1.5)

    assert stats["spans"].records == 2000 and stats["spans"].dead_letters == 1000
    assert stats["dlq"].records == 1000  # every dead letter was also published to agl.dlq ...
    stored = {r[0] for r in ch.query_rows("SELECT SpanId FROM spans FINAL")[1]}
    assert stored == good_ids
    cols, rows = ch.query_rows(
        "SELECT Processor, count(), countIf(Reason = ''), uniqExact(Partition, Offset) FROM dead_letters FINAL "
        "WHERE SourceTopic = {t:String} GROUP BY Processor",
        {"t": settings.topic("spans")},
    )
    assert rows == [("sink-spans", 1000, 0, 1000)]  # ... and the two copies collapsed into one row each
    reasons = {r[0] for r in ch.query_rows("SELECT DISTINCT Reason FROM dead_letters")[1]}
    assert any("not valid JSON" in r for r in reasons)
    assert any("expected schema 'span'" in r for r in reasons)
    assert any("unsupported schema version" in r for r in reasons)
    assert any("before start_time" in r for r in reasons)
    # the original bytes are kept
    payloads = {r[0] for r in ch.query_rows("SELECT Payload FROM dead_letters")[1]}
    assert "[1, 2, 3]" in payloads


async def test_inserts_are_retried_until_the_table_accepts_them(topics: Settings, ch: ClickHouse) -> None:
    """A failing insert is retried (not skipped, not committed); once ClickHouse accepts it the rows land."""
    settings = topics
    ch.command("RENAME TABLE triplets TO triplets_hidden")
    await _produce(settings, "triplets", [(f"ro-{i:012x}", make_trajectory(f"ro-{i:012x}", n=1)) for i in range(5)])
    stop = asyncio.Event()
    service = SinkService(settings, ["triplets"], ch=ch, options=FAST, apply_migrations=False)
    task = asyncio.create_task(service.run(stop))
    while not (service.sinks and service.sinks[0].stats.retries >= 2):
        assert not task.done(), "the sink must keep retrying, not exit"
        await asyncio.sleep(0.1)
    assert service.sinks[0].stats.records == 0  # nothing counted (or committed) while the insert fails
    ch.command("RENAME TABLE triplets_hidden TO triplets")
    while ch.scalar("SELECT count() FROM triplets") < 5:
        assert not task.done()
        await asyncio.sleep(0.1)
    stop.set()
    stats = await task
    assert stats["triplets"].records == 5 and stats["triplets"].last_error is None
    assert ch.scalar("SELECT count() FROM triplets FINAL") == 5
