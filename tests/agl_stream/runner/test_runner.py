"""The runner against a real broker: tasks in, spans / attempt events / worker heartbeats out."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

import pytest

from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.emitter import find_final_reward
from agl_stream.runner import Hook, LitAgentRunner
from agl_stream.runner.runner import SHUTDOWN_ERROR
from agl_stream.types import LLM, AttemptEvent, DeadLetter, PromptTemplate, Span, Worker
from tests.agl_stream.runner import agents
from tests.agl_stream.runner.helpers import collect, run_with_timeout

pytestmark = pytest.mark.integration


def _finished(events: list[AttemptEvent]) -> dict[str, AttemptEvent]:
    return {e.rollout_id: e for e in events if e.kind == "finished"}


def _spans_by_attempt(spans: list[Span]) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        grouped[span.attempt_id].append(span)
    return grouped


async def _enqueue(settings: Settings, inputs: list[Any], **kwargs: Any) -> list[str]:
    async with StoreClient(settings) as store:
        return [(await store.enqueue_rollout(task, **kwargs)).rollout_id for task in inputs]


async def test_rollout_decorator_agent_spans_rewards_and_events(topics: Settings) -> None:
    ids = await _enqueue(topics, [{"x": i, "steps": 3} for i in range(6)], mode="train")
    runner = LitAgentRunner(agents.reward_agent, topics, concurrency=3, max_rollouts=6, heartbeat_interval=0.2)
    stats = await run_with_timeout(runner.run())
    assert stats.rollouts_succeeded == 6 and stats.rollouts_failed == 0  # type: ignore[attr-defined]

    events = await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 6)
    finished = _finished(events)
    assert set(finished) == set(ids)
    assert {e.rollout_id for e in events if e.kind == "started"} == set(ids)
    expected_spans = sum(e.span_count or 0 for e in finished.values())
    assert expected_spans == 6 * 4  # three messages and one reward per rollout

    spans = await collect(topics, "spans", Span, lambda s: len(s) >= expected_spans)
    by_attempt = _spans_by_attempt(spans)
    for rollout_id, event in finished.items():
        assert event.status == "succeeded" and event.worker_id == runner.worker_id
        attempt_spans = by_attempt[event.attempt_id]
        assert [s.sequence_id for s in attempt_spans] == list(range(1, 5)), "spans arrive in sequence order"
        assert {s.rollout_id for s in attempt_spans} == {rollout_id}
        x = int(round(event.metadata["final_reward"] * 10))
        assert find_final_reward(attempt_spans) == pytest.approx(x / 10)
        assert attempt_spans[-1].resource.attributes["agl.worker_id"] == runner.worker_id
    workers = await collect(topics, "workers", Worker, lambda w: any(r.status == "offline" for r in w))
    assert workers[0].worker_id == runner.worker_id and workers[0].heartbeat_stats["pid"] > 0
    assert workers[-1].status == "offline"


async def test_plain_opentelemetry_agent_is_traced(topics: Settings) -> None:
    (rid,) = await _enqueue(topics, [{"x": 3}])
    await run_with_timeout(LitAgentRunner(agents.plain_otel_agent, topics, max_rollouts=1).run())
    spans = await collect(topics, "spans", Span, lambda s: len(s) >= 3)
    names = {s.name: s for s in spans}
    assert set(names) == {"plan", "openai.chat.completion", "agentlightning.annotation"}
    assert names["openai.chat.completion"].parent_id == names["plan"].span_id
    assert names["plan"].attributes["task.x"] == 3 and {s.rollout_id for s in spans} == {rid}
    assert find_final_reward(spans) == 3.0


async def test_failing_rollout_is_reported_and_runner_keeps_going(topics: Settings, caplog: pytest.LogCaptureFixture) -> None:
    ids = await _enqueue(topics, [{"x": 0, "fail": True}, {"x": 1}, {"x": 2}])
    caplog.set_level(logging.WARNING)
    stats = await run_with_timeout(LitAgentRunner(agents.flaky_agent, topics, max_rollouts=3).run())
    assert (stats.rollouts_failed, stats.rollouts_succeeded) == (1, 2)  # type: ignore[attr-defined]
    assert "returned an int" in caplog.text
    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 3))
    assert finished[ids[0]].status == "failed" and "poisoned" in (finished[ids[0]].error or "")
    assert finished[ids[1]].status == finished[ids[2]].status == "succeeded"
    spans = await collect(topics, "spans", Span, lambda s: len(s) >= 3)
    (exception,) = [s for s in spans if s.rollout_id == ids[0]]
    assert exception.name == "agentlightning.exception" and exception.attributes["exception.type"] == "ValueError"


class _RecordingHook(Hook):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Any) -> None:
        self.calls.append("rollout_start")
        raise RuntimeError("hooks may fail")

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
        self.calls.append("trace_start")

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
        self.calls.append("trace_end")

    async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Any, spans: Any) -> None:
        self.calls.append(f"rollout_end:{len(spans)}")


async def test_hooks_modes_and_resources(topics: Settings) -> None:
    async with StoreClient(topics) as store:
        first = await store.add_resources({"main_llm": LLM(endpoint="http://a/v1", model="m")})
        latest = await store.add_resources({"main_llm": LLM(endpoint="http://b/v1", model="m"),
                                            "prompt": PromptTemplate(template="{q}")})  # fmt: skip
        train = await store.enqueue_rollout({"x": 1}, mode="train", resources_id=first.resources_id)
        val = await store.enqueue_rollout({"x": 2}, mode="val")
        missing = await store.enqueue_rollout({"x": 3}, mode="val", resources_id="rs-doesnotexist")
    hook = _RecordingHook()
    runner = LitAgentRunner(agents.ModeAgent(), topics, hooks=[hook], max_rollouts=3, resources_wait=1.0)
    stats = await run_with_timeout(runner.run())
    assert (stats.rollouts_succeeded, stats.rollouts_failed, stats.hook_errors) == (2, 1, 0)  # type: ignore[attr-defined]
    assert runner.hooks.errors == 3
    assert hook.calls.count("trace_start") == 3 and hook.calls.count("rollout_end:2") == 2

    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 3))
    assert "not found" in (finished[missing.rollout_id].error or "")
    objects = {s.rollout_id: s for s in await collect(topics, "spans", Span, lambda s: len(s) >= 5)
               if s.name == "agentlightning.object"}  # fmt: skip
    assert objects[train.rollout_id].attributes["agentlightning.object.json"] == '{"mode": "train", "resources": ["main_llm"]}'
    assert objects[val.rollout_id].attributes["agentlightning.object.json"] == (
        '{"mode": "val", "resources": ["main_llm", "prompt"]}'
    )
    assert latest.version == first.version + 1


async def test_undecodable_task_goes_to_dead_letters(topics: Settings) -> None:
    from agl_stream.kafka import RecordProducer

    # A bad record at the head of every partition: whichever partition the good task lands on, the
    # runner reads a bad record before it (a single one could sit on a partition it never reaches).
    async with RecordProducer(topics) as producer:
        for partition in range(topics.partitions):
            await producer.send_and_wait(topics.topic("tasks"), b"not an envelope", key="bad", partition=partition)
    (rid,) = await _enqueue(topics, [{"x": 1}])
    stats = await run_with_timeout(LitAgentRunner(agents.flaky_agent, topics, max_rollouts=1).run())
    assert stats.rollouts_rejected >= 1 and stats.rollouts_succeeded == 1  # type: ignore[attr-defined]
    letters = await collect(topics, "dlq", DeadLetter, lambda d: len(d) >= stats.rollouts_rejected)  # type: ignore[attr-defined]
    assert len(letters) == stats.rollouts_rejected  # type: ignore[attr-defined]
    for letter in letters:
        assert letter.payload == b"not an envelope" and letter.source_topic == topics.topic("tasks")
        assert "envelope" in letter.reason or "JSON" in letter.reason


async def test_stop_cancels_running_attempts_after_grace(topics: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_TEST_AGENT_SLEEP", "3")
    (rid,) = await _enqueue(topics, [{"x": 1}])
    stop = asyncio.Event()
    runner = LitAgentRunner(agents.slow_agent, topics, shutdown_grace=1.0, heartbeat_interval=0.2)
    run = asyncio.create_task(runner.run(stop))
    beats = await collect(topics, "attempts", AttemptEvent, lambda ev: any(e.kind == "heartbeat" for e in ev))
    heartbeat = next(e for e in beats if e.kind == "heartbeat")
    assert heartbeat.rollout_id == rid and heartbeat.stats["process_rss_mb"] > 0
    stop.set()
    stats = await run_with_timeout(run)
    assert stats.rollouts_failed == 1  # type: ignore[attr-defined]
    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 1))
    assert finished[rid].error == SHUTDOWN_ERROR and finished[rid].span_count == 1


async def test_a_task_delivered_again_after_its_claim_does_not_run_twice(topics: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """A redelivery looks like a second record of an attempt already claimed: the runner skips it."""
    from agl_stream.kafka import RecordProducer
    from agl_stream.types import AttemptedRollout

    first, second = await _enqueue(topics, [{"x": 1, "steps": 2}, {"x": 2, "steps": 2}], mode="train")
    tasks = {t.rollout_id: t for t in await collect(topics, "tasks", AttemptedRollout, lambda got: len(got) >= 2)}
    async with RecordProducer(topics) as producer:  # the first task's record again, as a redelivery brings it
        await producer.send_and_wait(topics.topic("tasks"), tasks[first], key=first)
    caplog.set_level(logging.WARNING)
    stop = asyncio.Event()
    runner = LitAgentRunner(agents.reward_agent, topics, heartbeat_interval=0.2)
    run = asyncio.create_task(runner.run(stop))
    for _ in range(300):  # until both ran and the copy was seen (or 30 s)
        if runner.stats.rollouts_succeeded >= 2 and runner.stats.redelivered_skipped >= 1:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # time to run the copy, were it run
    stop.set()
    stats = await run_with_timeout(run)
    assert stats.rollouts_succeeded == 2 and stats.redelivered_skipped == 1  # type: ignore[attr-defined]
    events = await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 2)
    started = [e.rollout_id for e in events if e.kind == "started"]
    assert started.count(first) == 1 and started.count(second) == 1
    assert "delivered again after this runner took it" in caplog.text


def test_a_delivery_of_a_later_tenure_is_run_while_an_older_claim_is_still_under_way(settings: Settings) -> None:
    """The CI failure of the first guard (a broker SIGKILLed and restarted, a rollout stuck ``preparing``): a claim
    waits for its commit while the broker is down, the partition is revoked and assigned back, the group delivers
    the task again; the first claim then gives it up (its commit never landed). Skipping the new delivery because
    a claim of the attempt was under way left the task to nobody. Skipped are: a second record of the same
    tenure (the task written twice), and any delivery once a claim held."""
    from aiokafka.structs import ConsumerRecord

    from agl_stream.kafka import Decoded
    from agl_stream.types import Attempt, AttemptedRollout

    task = AttemptedRollout(rollout_id="ro-000000000c01", input={}, attempt=Attempt(
        rollout_id="ro-000000000c01", attempt_id="at-00000c01", sequence_id=1))  # fmt: skip
    record = ConsumerRecord("agl.tasks", 0, 7, 0, 0, b"ro-000000000c01", b"", None, 0, 0, ())
    runner = LitAgentRunner(agents.reward_agent, settings)
    runner._claiming[task.attempt.attempt_id] = 3  # noqa: SLF001 - a claim under way, delivered in tenure 3
    assert runner._already_claimed(Decoded(task, record, tenure=3))  # noqa: SLF001 - the same record written twice
    assert not runner._already_claimed(Decoded(task, record, tenure=4))  # noqa: SLF001 - redelivered after a rebalance
    runner._remember_claim(task.attempt.attempt_id)  # noqa: SLF001 - a claim held
    assert runner._already_claimed(Decoded(task, record, tenure=5))  # noqa: SLF001
    assert runner.stats.redelivered_skipped == 2
