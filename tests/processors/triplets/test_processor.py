"""The triplet processor on a real broker: golden trajectories, late spans, grace, bad input, adapter errors, restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import AsyncIterator, Optional

import pytest

from agl_stream.adapter import TracerTraceToTriplet
from agl_stream.broker import choose_local_broker
from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.serialization import decode
from agl_stream.types import Attempt, AttemptEvent, DeadLetter, Rollout, RolloutControl, RolloutSnapshot, Span, Trajectory
from agl_stream_processors.triplets import TripletProcessor, TripletProcessorOptions

from tests.agl_stream.adapter.spans import SpanBuilder

pytestmark = pytest.mark.integration

FAST = TripletProcessorOptions(grace_seconds=1.0, orphan_seconds=60.0, poll_timeout=0.05, commit_interval=0.2)


@contextlib.asynccontextmanager
async def running(processor: TripletProcessor) -> AsyncIterator[TripletProcessor]:
    stop = asyncio.Event()
    task = asyncio.create_task(processor.run(stop))
    ready = asyncio.create_task(processor.ready.wait())
    done, _ = await asyncio.wait({task, ready}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # surfaces a startup failure
    assert ready in done, "processor got no partitions"
    try:
        yield processor
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def read(settings: Settings, short: str, model: type, count: int, timeout: float = 20.0) -> list:  # type: ignore[type-arg]
    """Read ``count`` records of ``model`` from a topic (all partitions, no group); fails on timeout."""
    out: list = []  # type: ignore[type-arg]
    async with RecordConsumer(settings, [settings.topic(short)], None) as consumer:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(out) < count and asyncio.get_running_loop().time() < deadline:
            good, bad = await consumer.get_decoded(model, timeout=0.2)
            assert not bad, [b.error.reason for b in bad]
            out.extend(d.value for d in good)
    assert len(out) == count, f"expected {count} records on {short}, got {len(out)}"
    return out


def golden_spans(rollout_id: str, attempt_id: str) -> list[Span]:
    """Nested agents, an intermediate reward, token ids, logprobs and policy versions."""
    b = SpanBuilder(rollout_id=rollout_id, attempt_id=attempt_id)
    main = b.agent("main", 0.0, 10.0)
    write = b.agent("write", 1.0, 4.0, main)
    b.llm(1.5, 3.5, write, prompt=[1, 2, 3], response=[4, 5], response_id="c1",
          extra={"response_logprobs": [-0.1, -0.2], "agl.policy_version": 3})  # fmt: skip
    b.reward(0.5, 4.5, main)
    check = b.agent("check", 5.0, 8.0, main)
    b.llm(5.5, 7.5, check, prompt=[6, 7], response=[8], response_id="c2", extra={"agl.policy_version": 4})
    b.reward(1.0, 9.0, main)
    return b.spans


def events(rollout_id: str, attempt_id: str, span_count: int, **meta: object) -> tuple[AttemptEvent, AttemptEvent]:
    common = dict(rollout_id=rollout_id, attempt_id=attempt_id, mode="train", resources_id="rs-1", metadata=meta)
    return (
        AttemptEvent(kind="started", worker_id="Worker-0", **common),  # type: ignore[arg-type]
        AttemptEvent(kind="finished", status="succeeded", span_count=span_count, worker_id="Worker-0", **common),  # type: ignore[arg-type]
    )


def verdict(rollout_id: str, attempt_id: str, status: str = "succeeded", sequence_id: int = 1) -> RolloutSnapshot:
    """The state machine's snapshot naming an attempt (terminal: a finished attempt waits for one)."""
    attempt_status = status if status in ("succeeded", "failed") else "unresponsive"
    attempt = Attempt(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id, start_time=0.0,
                      status=attempt_status)  # type: ignore[arg-type]  # fmt: skip
    rollout = Rollout(rollout_id=rollout_id, status=status, start_time=0.0)  # type: ignore[arg-type]
    return RolloutSnapshot(rollout=rollout, attempt=attempt, attempts=sequence_id)


async def test_golden_trajectory_from_spans_and_attempt_events(topics: Settings) -> None:
    rid, aid = "ro-aaaaaaaaaaa1", "at-aaaaaaa1"
    spans = golden_spans(rid, aid)
    started, finished = events(rid, aid, len(spans), group_id="gr-7")
    async with running(TripletProcessor(topics, options=FAST)) as proc, RecordProducer(topics) as producer:
        await producer.send_and_wait(topics.topic("attempts"), started, key=rid)
        # 'finished' arrives before the last spans: the processor waits for span_count spans
        for span in spans[:3]:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        await producer.send_and_wait(topics.topic("attempts"), RolloutControl(rollout_id=rid), key=rid,
                                     headers={"agl-kind": "control"})  # fmt: skip
        for span in reversed(spans[3:]):
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
        # a span of the same attempt after adaptation: counted and dead-lettered, no second trajectory
        late = spans[0].model_copy(update={"span_id": "f" * 16})
        await producer.send_and_wait(topics.topic("spans"), late, key=rid)
        (letter,) = await read(topics, "dlq", DeadLetter, 1)
        assert proc.health()["late_spans"] == 1
    assert (trajectory.rollout_id, trajectory.attempt_id, trajectory.group_id) == (rid, aid, "gr-7")
    assert (trajectory.mode, trajectory.resources_id, trajectory.status) == ("train", "rs-1", "succeeded")
    assert trajectory.span_count == len(spans) and trajectory.final_reward == 1.0
    assert [(t.prompt_token_ids, t.response_token_ids, t.reward) for t in trajectory.triplets] == [
        ([1, 2, 3], [4, 5], 0.5),
        ([6, 7], [8], 1.0),
    ]
    assert [t.metadata["agent_name"] for t in trajectory.triplets] == ["write", "check"]
    assert trajectory.triplets[0].response_logprobs == [-0.1, -0.2]
    assert trajectory.policy_version == 3 and trajectory.metadata["policy_versions"] == [3, 4]
    assert "incomplete" not in trajectory.metadata
    assert letter.reason.startswith("late span") and decode(letter.payload, Span).span_id == "f" * 16


async def test_configured_adapter_and_grace_period_for_missing_spans(topics: Settings) -> None:
    rid, aid = "ro-aaaaaaaaaaa2", "at-aaaaaaa2"
    spans = golden_spans(rid, aid)
    _, finished = events(rid, aid, len(spans) + 2)  # two spans never arrive
    processor = TripletProcessor(topics, adapter="tracer:agent_match=check", options=FAST)
    async with running(processor), RecordProducer(topics) as producer:
        for span in spans:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
    assert [(t.prompt_token_ids, t.reward) for t in trajectory.triplets] == [([6, 7], 1.0)]
    assert trajectory.metadata["incomplete"] is True
    assert (trajectory.metadata["expected_spans"], trajectory.metadata["received_spans"]) == (len(spans) + 2, len(spans))
    assert processor.health()["incomplete_attempts"] == 1


async def test_the_grace_period_counts_from_what_was_read_not_the_wall_clock(topics: Settings) -> None:
    """Spans waiting unread (the consumer cannot fetch them) are not given up for missing after the grace period."""
    rid, aid = "ro-aaaaaaaaaaa9", "at-aaaaaaa9"
    spans = golden_spans(rid, aid)
    _, finished = events(rid, aid, len(spans))
    processor = TripletProcessor(topics, options=FAST)
    async with running(processor), RecordProducer(topics) as producer:
        consumer = processor._consumer.raw  # noqa: SLF001 - stand in for a consumer cut from the spans' broker
        paused = [tp for tp in consumer.assignment() if tp.topic == topics.topic("spans")]
        consumer.pause(*paused)
        for span in spans:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        await asyncio.sleep(3 * FAST.grace_seconds)  # the wall clock passes the grace period; the spans are unread
        assert processor.health()["pending_attempts"] == 1
        consumer.resume(*paused)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
    assert trajectory.span_count == len(spans) and "incomplete" not in trajectory.metadata
    assert processor.health().get("incomplete_attempts", 0) == 0


def malformed(i: int) -> Optional[bytes]:
    kinds = [
        b"not json at all",
        b'{"schema":"span","v":1,"data":{"rollout_id":"ro-x"}}',  # missing required fields
        b'{"schema":"span","v":99,"data":{}}',  # unsupported version
        b'{"schema":"worker","v":1,"data":{"worker_id":"w"}}',  # wrong schema for the topic
        b"[1,2,3]",
        b'{"schema":"attempt_event","v":1,"data":{"kind":"exploded","rollout_id":"r","attempt_id":"a"}}',
        b"\xff\xfe\x00binary",
        None,  # a value-less record
    ]
    return kinds[i % len(kinds)]


async def test_thousand_malformed_records_interleaved_with_good_ones(topics: Settings) -> None:
    n_attempts, n_bad = 40, 1000
    async with running(TripletProcessor(topics, options=FAST)) as proc, RecordProducer(topics) as producer:
        futures = []
        bad_sent = 0
        for a in range(n_attempts):
            rid, aid = f"ro-{a:012x}", f"at-{a:08x}"
            spans = golden_spans(rid, aid)
            _, finished = events(rid, aid, len(spans))
            for span in spans:
                futures.append(await producer.send(topics.topic("spans"), span, key=rid))
                for _ in range(2):
                    if bad_sent < n_bad:
                        topic = topics.topic("spans" if bad_sent % 2 else "attempts")
                        futures.append(await producer.send(topic, malformed(bad_sent), key=rid))
                        bad_sent += 1
            futures.append(await producer.send(topics.topic("attempts"), finished, key=rid))
            futures.append(await producer.send(topics.topic("rollouts"), verdict(rid, aid), key=rid))
        while bad_sent < n_bad:
            futures.append(await producer.send(topics.topic("spans"), malformed(bad_sent), key=f"k{bad_sent}"))
            bad_sent += 1
        await asyncio.gather(*futures)
        trajectories = await read(topics, "triplets", Trajectory, n_attempts, timeout=60)
        letters = await read(topics, "dlq", DeadLetter, n_bad, timeout=60)
        health = proc.health()
    assert sorted(t.rollout_id for t in trajectories) == [f"ro-{a:012x}" for a in range(n_attempts)]
    assert all(len(t.triplets) == 2 and t.final_reward == 1.0 for t in trajectories)
    assert all(letter.reason and letter.processor == "triplets" for letter in letters)
    assert sorted(letter.payload for letter in letters) == sorted(malformed(i) or b"" for i in range(n_bad))
    assert health["invalid_spans"] + health["invalid_attempt_events"] == n_bad
    reasons = {letter.reason.split(":")[0] for letter in letters}
    assert {"value is not valid JSON", "record has no value (tombstone or empty)"} <= reasons


async def test_uncommitted_spans_are_read_again_after_a_restart(topics: Settings) -> None:
    """Spans read by a processor that stopped before the attempt finished are not lost (at-least-once)."""
    rid, aid = "ro-aaaaaaaaaaa3", "at-aaaaaaa3"
    spans = golden_spans(rid, aid)
    _, finished = events(rid, aid, len(spans))
    async with RecordProducer(topics) as producer:
        first = TripletProcessor(topics, options=FAST)
        async with running(first):
            for span in spans:
                await producer.send_and_wait(topics.topic("spans"), span, key=rid)
            while first.health().get("spans", 0) < len(spans):
                await asyncio.sleep(0.05)
        # the first instance is gone with the spans buffered but not committed
        async with running(TripletProcessor(topics, options=FAST)):
            await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
            (trajectory,) = await read(topics, "triplets", Trajectory, 1)
    assert trajectory.span_count == len(spans) and "incomplete" not in trajectory.metadata


async def test_a_restart_replays_each_attempt_whole_or_not_at_all(topics: Settings) -> None:
    """Attempts interleave on a partition: A finishes while C (same partition) is still running, so the
    committed position stops at C's first span and A's spans behind it are redelivered after a restart
    without A's (committed) finished event. They must be recognised, not buffered as an attempt that
    never finishes; C's trajectory is then built from all of its spans, and A is not adapted twice."""
    rid, aid_a, aid_c = "ro-aaaaaaaaaaa9", "at-aaaaaaaa", "at-cccccccc"
    spans_a, spans_c = golden_spans(rid, aid_a), golden_spans(rid, aid_c)
    _, finished_a = events(rid, aid_a, len(spans_a))
    _, finished_c = events(rid, aid_c, len(spans_c))
    async with RecordProducer(topics) as producer:
        first = TripletProcessor(topics, options=FAST)
        async with running(first):
            await producer.send_and_wait(topics.topic("spans"), spans_c[0], key=rid)
            for span in spans_a:
                await producer.send_and_wait(topics.topic("spans"), span, key=rid)
            await producer.send_and_wait(topics.topic("attempts"), finished_a, key=rid)
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid_a), key=rid)
            (trajectory_a,) = await read(topics, "triplets", Trajectory, 1)
            await asyncio.sleep(3 * FAST.commit_interval)  # A's finished event gets committed
        second = TripletProcessor(topics, options=FAST)
        async with running(second):
            for span in spans_c[1:]:
                await producer.send_and_wait(topics.topic("spans"), span, key=rid)
            await producer.send_and_wait(topics.topic("attempts"), finished_c, key=rid)
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid_c), key=rid)
            trajectories = await read(topics, "triplets", Trajectory, 2)
            health = second.health()
    assert health["pending_attempts"] == 0, "A's replayed spans were buffered as an attempt that never finishes"
    assert trajectory_a.attempt_id == aid_a
    assert sorted(t.attempt_id for t in trajectories) == [aid_a, aid_c], "A was adapted again, or C not at all"
    (trajectory_c,) = [t for t in trajectories if t.attempt_id == aid_c]
    assert trajectory_c.span_count == len(spans_c) and "incomplete" not in trajectory_c.metadata
    assert health["replayed_spans"] == len(spans_a) and health["restored_adapted"] >= 1
    assert health.get("late_spans", 0) == 0


class BrokenForOneRollout(TracerTraceToTriplet):
    def adapt(self, source):  # type: ignore[no-untyped-def]
        if source and source[0].rollout_id.endswith("bad"):
            raise ValueError("cannot make sense of these spans")
        return super().adapt(source)


async def test_an_adapter_failure_is_dead_lettered_and_other_attempts_go_on(topics: Settings) -> None:
    processor = TripletProcessor(topics, adapter=BrokenForOneRollout(), options=FAST)
    async with running(processor), RecordProducer(topics) as producer:
        for rid, aid in (("ro-000000000bad", "at-0000000b"), ("ro-0000000000ok", "at-0000000c")):
            spans = golden_spans(rid, aid)
            for span in spans:
                await producer.send_and_wait(topics.topic("spans"), span, key=rid)
            _, finished = events(rid, aid, len(spans))
            await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
        (letter,) = await read(topics, "dlq", DeadLetter, 1)
    assert trajectory.rollout_id == "ro-0000000000ok"
    assert "could not be adapted" in letter.reason and "cannot make sense" in letter.reason
    assert letter.error_type == "ValueError" and decode(letter.payload, AttemptEvent).kind == "finished"
    assert processor.health()["adapter_errors"] == 1


async def test_an_attempt_whose_runner_never_reports_is_abandoned_once_the_attempt_events_are_read_past_it(
    topics: Settings,
) -> None:
    """The orphan clock follows what was read of ``agl.attempts`` (besides the processor's own clock): with the
    partitions read to their end, a silent attempt's spans still leave as dead letters after ``orphan_seconds``,
    while an attempt that finishes goes on as usual."""
    from dataclasses import replace

    processor = TripletProcessor(topics, options=replace(FAST, orphan_seconds=2.0))
    async with running(processor), RecordProducer(topics) as producer:
        silent = golden_spans("ro-0000000silent", "at-0000000s")[:3]
        for span in silent:
            await producer.send_and_wait(topics.topic("spans"), span, key=span.rollout_id)
        rid, aid = "ro-00000000fine", "at-0000000f"
        spans = golden_spans(rid, aid)
        for span in spans:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), events(rid, aid, len(spans))[1], key=rid)
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
        letters = await read(topics, "dlq", DeadLetter, len(silent), timeout=30.0)
    assert trajectory.rollout_id == rid and trajectory.triplets
    assert all("abandoned attempt" in letter.reason for letter in letters)
    assert sorted(decode(letter.payload, Span).span_id for letter in letters) == sorted(s.span_id for s in silent)
    assert processor.health()["abandoned_attempts"] == 1


async def test_a_slow_attempt_that_heartbeats_past_the_orphan_time_is_adapted_from_all_its_spans(topics: Settings) -> None:
    """Half the spans, then heartbeats for longer than ``orphan_seconds``, then the rest and ``finished``: the
    attempt is alive all along, so nothing is abandoned and the trajectory has every span (the nemesis saw a
    broker node killed mid-attempt end in a trajectory built from 11 of 23 spans)."""
    from dataclasses import replace

    from agl_stream.types import AttemptEvent

    processor = TripletProcessor(topics, options=replace(FAST, orphan_seconds=2.0))
    rid, aid = "ro-0000000slow1", "at-000000slow"
    spans = golden_spans(rid, aid)
    half = len(spans) // 2
    async with running(processor), RecordProducer(topics) as producer:
        for span in spans[:half]:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        for _ in range(8):  # 4 s of heartbeats: twice the orphan time
            beat = AttemptEvent(kind="heartbeat", rollout_id=rid, attempt_id=aid)
            await producer.send_and_wait(topics.topic("attempts"), beat, key=rid)
            await asyncio.sleep(0.5)
        assert processor.health().get("abandoned_attempts", 0) == 0
        for span in spans[half:]:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), events(rid, aid, len(spans))[1], key=rid)
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
    assert trajectory.rollout_id == rid
    assert trajectory.span_count == len(spans), "built from every span, not after the grace period from the rest"
    assert processor.health().get("abandoned_attempts", 0) == 0


async def test_an_abandoned_attempt_that_finishes_after_all_is_adapted_from_all_its_spans(topics: Settings) -> None:
    """Half the spans, then silence past ``orphan_seconds`` (a runner cut off from the brokers: its heartbeats do not
    arrive either), then the rest and ``finished``. The attempt was abandoned (its spans dead-lettered), but its
    trajectory is built from every span, read again from the topic (seed 202: two trajectories built from 13 of 34
    and 0 of 15 spans after a broker node's death cut a runner off for 36 s)."""
    from dataclasses import replace

    processor = TripletProcessor(topics, options=replace(FAST, orphan_seconds=1.0))
    rid, aid = "ro-0000000cut01", "at-000000cut1"
    spans = golden_spans(rid, aid)
    half = len(spans) // 2
    async with running(processor), RecordProducer(topics) as producer:
        for span in spans[:half]:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        deadline = asyncio.get_running_loop().time() + 30
        while processor.health().get("abandoned_attempts", 0) < 1:
            assert asyncio.get_running_loop().time() < deadline, processor.health()
            await asyncio.sleep(0.1)
        for span in spans[half:]:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), events(rid, aid, len(spans))[1], key=rid)
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
    assert trajectory.span_count == len(spans), "built from every span, not from those after the silence"
    health = processor.health()
    assert health["abandoned_recovered"] == 1 and health["recovered_spans"] == half
    assert health.get("incomplete_attempts", 0) == 0


async def test_a_superseded_attempt_is_marked_whichever_order_its_finished_arrives_in(topics: Settings) -> None:
    """Attempt 1 went silent and was retried as attempt 2; attempt 1's runner reports later (or earlier)
    than attempt 2's. Both trajectories leave, only attempt 2's as the rollout's ``final`` one."""
    out = {}
    for order in ("late", "early"):
        rid = "ro-aaaaaaaaaa1" + ("0" if order == "late" else "1")
        aid1, aid2 = f"at-{order[:1]}0000001", f"at-{order[:1]}0000002"
        spans1, spans2 = golden_spans(rid, aid1), golden_spans(rid, aid2)
        _, finished1 = events(rid, aid1, len(spans1))
        _, finished2 = events(rid, aid2, len(spans2))
        finished2 = finished2.model_copy(update={"attempt_sequence_id": 2})
        async with running(TripletProcessor(topics, options=FAST)), RecordProducer(topics) as producer:
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid1, "requeuing"), key=rid)
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid2, "requeuing", 2), key=rid)
            first, second = ((spans2, finished2), (spans1, finished1)) if order == "late" else ((spans1, finished1), (spans2, finished2))
            for spans, finished in (first, second):
                for span in spans:
                    await producer.send_and_wait(topics.topic("spans"), span, key=rid)
                await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
            await asyncio.sleep(3 * FAST.poll_timeout)
            await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid2, "succeeded", 2), key=rid)
            out[order] = [t for t in await read(topics, "triplets", Trajectory, 2 * len(out) + 2) if t.rollout_id == rid]
    for order, trajectories in out.items():
        decisions = {t.attempt_id: (t.decision, t.rollout_status, t.trainable) for t in trajectories}
        aid1, aid2 = f"at-{order[:1]}0000001", f"at-{order[:1]}0000002"
        # the superseded one carries whichever status the rollout had when the processor decided on it
        assert decisions[aid1][0::2] == ("superseded", False) and decisions[aid1][1] in ("requeuing", "succeeded"), order
        assert decisions[aid2] == ("final", "succeeded", True), order


#: a decision wait of half a second: an attempt nobody decides on leaves undecided at once
UNDECIDED_FAST = TripletProcessorOptions(grace_seconds=1.0, orphan_seconds=60.0, poll_timeout=0.05, commit_interval=0.2,
                                         decision_seconds=0.5)  # fmt: skip


async def send_attempt(producer: RecordProducer, topics: Settings, rid: str, aid: str) -> None:
    """An attempt's golden spans, then its ``finished`` event."""
    spans = golden_spans(rid, aid)
    for span in spans:
        await producer.send_and_wait(topics.topic("spans"), span, key=rid)
    await producer.send_and_wait(topics.topic("attempts"), events(rid, aid, len(spans))[1], key=rid)


async def test_an_attempt_the_state_machine_never_decides_on_leaves_undecided(topics: Settings) -> None:
    rid, aid = "ro-aaaaaaaaaa20", "at-a0000020"
    processor = TripletProcessor(topics, options=UNDECIDED_FAST)
    async with running(processor), RecordProducer(topics) as producer:
        await send_attempt(producer, topics, rid, aid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
        health = processor.health()
    assert (trajectory.decision, trajectory.rollout_status, trajectory.trainable) == ("undecided", None, False)
    assert health["trajectories_undecided"] == 1 and health["awaiting_decision"] == 0


async def test_a_decision_that_comes_after_the_wait_makes_an_undecided_trajectory_final(topics: Settings) -> None:
    """Seed 303 at 20,000 rollouts: ten rollouts' succeeded snapshots came eight minutes late; their trajectories
    left undecided and were never trained. A late decision now publishes the trajectory again, as final."""
    rid, aid = "ro-aaaaaaaaaa21", "at-a0000021"
    processor = TripletProcessor(topics, options=UNDECIDED_FAST)
    async with running(processor), RecordProducer(topics) as producer:
        await send_attempt(producer, topics, rid, aid)
        (first,) = await read(topics, "triplets", Trajectory, 1)
        assert first.decision == "undecided" and processor.health()["undecided_held"] == 1
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)  # the late snapshot
        first_again, late = await read(topics, "triplets", Trajectory, 2)
        health = processor.health()
    assert first_again.decision == "undecided"
    assert (late.attempt_id, late.decision, late.rollout_status, late.trainable) == (aid, "final", "succeeded", True)
    assert late.triplets == first.triplets
    assert health["trajectories_final_late"] == 1 and health["undecided_held"] == 0


@pytest.fixture
def transactional(topics: Settings) -> Settings:
    """``topics`` with Kafka transactions on (Apache Kafka only: Tansu refuses transactional producers)."""
    if not os.environ.get("AGL_TEST_KAFKA_BOOTSTRAP") and choose_local_broker(Settings.from_env()) != "kafka":
        pytest.skip("transactions need Apache Kafka; the session broker is Tansu")
    return topics.model_copy(update={"kafka_transactions": True})


async def test_with_transactions_a_crash_before_the_commit_leaves_no_trajectory_behind(transactional: Settings) -> None:
    """The first instance sends its trajectory (acknowledged, inside its open transaction) and dies before the
    transaction commits. A read-committed reader never sees that copy; the restarted instance writes the one
    it sees. A read-uncommitted reader sees both: the duplicate is what the transaction hides."""
    topics = transactional
    rid, aid = "ro-aaaaaaaaaa30", "at-a0000030"
    spans = golden_spans(rid, aid)
    _, finished = events(rid, aid, len(spans))
    never_commits = TripletProcessorOptions(grace_seconds=1.0, orphan_seconds=60.0, poll_timeout=0.05, commit_interval=3600)
    first = TripletProcessor(topics, options=never_commits)
    async with RecordProducer(topics.model_copy(update={"kafka_transactions": False})) as producer:
        with pytest.raises(RuntimeError, match="simulated crash"):
            async with running(first):
                for span in spans:
                    await producer.send_and_wait(topics.topic("spans"), span, key=rid)
                await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
                await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
                while first.health().get("trajectories_final", 0) < 1 or first.health()["in_flight"]:
                    await asyncio.sleep(0.05)
                # the loop leaves at once, committing nothing (no transaction, no offsets), as a SIGKILL would
                first._fatal = RuntimeError("simulated crash")
        assert first.health().get("transactions", 0) == 0
        async with running(TripletProcessor(topics, options=FAST)) as second:
            # the dead instance's open transaction blocks committed reads until the coordinator aborts it
            (trajectory,) = await read(topics, "triplets", Trajectory, 1, timeout=60.0)
            with pytest.raises(AssertionError, match="expected 2"):
                await read(topics, "triplets", Trajectory, 2, timeout=3.0)
            transactions = second.health().get("transactions", 0)
    uncommitted = topics.model_copy(update={"kafka_transactions": False})
    copies = await read(uncommitted, "triplets", Trajectory, 2)
    assert trajectory.attempt_id == aid and [c.attempt_id for c in copies] == [aid, aid]
    assert transactions >= 1


async def test_an_attempt_waiting_for_its_decision_holds_its_trajectory_not_its_spans(topics: Settings) -> None:
    """When the state machine lags, a hundred attempts or more wait for decisions: they must not keep their
    spans (decoded, and the records' bytes), only the trajectory and where the records were."""
    rid, aid = "ro-aaaaaaaaaa40", "at-a0000040"
    spans = golden_spans(rid, aid)
    _, finished = events(rid, aid, len(spans))
    processor = TripletProcessor(topics, options=FAST)
    async with running(processor), RecordProducer(topics) as producer:
        for span in spans:
            await producer.send_and_wait(topics.topic("spans"), span, key=rid)
        await producer.send_and_wait(topics.topic("attempts"), finished, key=rid)
        while processor.health()["awaiting_decision"] < 1:
            await asyncio.sleep(0.05)
        ((waiting, _since),) = processor._awaiting.values()
        assert processor.health()["buffered_spans"] == 0
        assert len(waiting.spans) == len(spans) and not any(hasattr(ref, "value") for ref in waiting.spans)
        assert waiting.trajectory.decision == "undecided" and len(waiting.trajectory.triplets) == 2
        await producer.send_and_wait(topics.topic("rollouts"), verdict(rid, aid), key=rid)
        (trajectory,) = await read(topics, "triplets", Trajectory, 1)
    assert (trajectory.decision, trajectory.rollout_status) == ("final", "succeeded")
    assert trajectory.triplets == waiting.trajectory.triplets


async def test_every_group_member_holds_the_same_partitions_of_spans_and_attempts(settings: Settings) -> None:
    """Three members of the triplets group (a restarted replica beside its killed predecessor's session is
    three): each must hold partition p of both topics, or it adapts attempts without their spans. Found by
    the nemesis (six trajectories with no triplets); aiokafka's default round-robin assignor splits them."""
    from agl_stream_processors.triplets.processor import check_co_partitioned, triplets_consumer
    from agl_stream_topics.admin import ensure_topics

    settings = settings.model_copy(update={"partitions": 4})
    assert (await ensure_topics(settings, strict=True)).ok
    group = f"{settings.topic_prefix}-triplets"
    members = [triplets_consumer(settings, group, max_poll_records=10) for _ in range(3)]
    spans, attempts = settings.topic("spans"), settings.topic("attempts")
    try:
        for member in members:
            await member.start()
        deadline = asyncio.get_running_loop().time() + 60
        while True:  # until the group settled: every partition of both topics held by exactly one member
            await asyncio.gather(*(m.getmany(timeout=0.2) for m in members))
            held = [tp for m in members for tp in m.raw.assignment()]
            if len(held) == len(set(held)) == 8:
                break
            assert asyncio.get_running_loop().time() < deadline, held
        for member in members:
            check_co_partitioned(member.raw.assignment(), spans, attempts)  # raises when split
        assert sum(bool(m.raw.assignment()) for m in members) >= 2  # the work is spread, not all on one
    finally:
        for member in members:
            await member.stop(commit=False)
