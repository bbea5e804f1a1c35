"""A runner written by hand against upstream's store API, on the real pipeline.

It claims work with ``dequeue_rollout`` (a member of the runners' consumer group), reports spans
with ``add_span`` / ``add_otel_span`` and its outcome with ``update_attempt``; the records flow
through the real state machine, triplet processor and sinks (in this process, owning the embedded
ClickHouse). The algorithm side reads everything back with the store API.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agl_stream import semconv
from agl_stream.adapter import TracerTraceToTriplet
from agl_stream.client import StoreClient, UnsupportedOnStream
from agl_stream.client.span_feed import SpanFeed
from agl_stream.config import Settings
from agl_stream.types import AttemptedRollout, PromptTemplate, RolloutConfig, Span, Trajectory
from tests.agl_stream.client.pipeline import store_with_pipeline
from tests.agl_stream.runner.helpers import collect

pytestmark = pytest.mark.integration

#: where query_spans answers from: ClickHouse (the sinks' table), or the span feed of agl.spans (a front door's)
SPAN_SOURCES = ("clickhouse", "feed")


def span_feed(settings: Settings, spans_from: str) -> SpanFeed | None:
    return SpanFeed(settings, margin=0.0) if spans_from == "feed" else None  # one machine, one clock


def answered_here(store: StoreClient, spans_from: str, queries: int) -> None:
    """With the feed, every span query was answered from it (none went to ClickHouse)."""
    if spans_from == "feed":
        assert store.span_feed is not None and store.span_reads == {"recent": queries}


def llm_span(task: AttemptedRollout, sequence_id: int, prompt: list[int], response: list[int]) -> Span:
    now = time.time() - 0.05  # ended before the reward span the test records next (adapters match rewards by time)
    return Span(
        rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id, sequence_id=sequence_id,
        trace_id="c" * 32, span_id=f"{sequence_id:016x}", name=semconv.LLM_CALL_SPAN_NAME, start_time=now,
        end_time=now + 0.01, attributes={semconv.PROMPT_TOKEN_IDS: prompt, semconv.RESPONSE_TOKEN_IDS: response,
                                         semconv.GEN_AI_RESPONSE_ID: f"resp-{task.rollout_id}-{sequence_id}"},
    )  # fmt: skip


def reward_otel_span(value: float):  # type: ignore[no-untyped-def]
    """A real OpenTelemetry ReadableSpan carrying a reward, as an OTel-instrumented runner has them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("hand-written").start_as_current_span(semconv.AGL_ANNOTATION) as span:
        span.set_attributes({"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value})
    (finished,) = exporter.get_finished_spans()
    return finished


async def dequeue_until(store: StoreClient, n: int, worker_id: str, timeout: float = 60.0) -> list[AttemptedRollout]:
    """Upstream's runner loop: poll ``dequeue_rollout`` until ``n`` tasks were claimed."""
    claimed: list[AttemptedRollout] = []
    deadline = time.monotonic() + timeout
    while len(claimed) < n:
        assert time.monotonic() < deadline, f"claimed only {len(claimed)} of {n} tasks"
        task = await store.dequeue_rollout(worker_id=worker_id)
        if task is None:
            await asyncio.sleep(0.1)
            continue
        claimed.append(task)
    return claimed


@pytest.mark.parametrize("spans_from", SPAN_SOURCES)
async def test_hand_written_runner_through_the_pipeline(topics: Settings, spans_from: str) -> None:
    async with store_with_pipeline(topics, dequeue_poll_timeout=1.0, span_feed=span_feed(topics, spans_from)) as store:
        resources = await store.add_resources({"prompt": PromptTemplate(template="Q: {q}")})
        enqueued = [await store.enqueue_rollout({"q": i}, mode="train", resources_id=resources.resources_id) for i in range(2)]
        # its own writes are readable at once
        assert [(await store.get_rollout_by_id(r.rollout_id)).status for r in enqueued] == ["queuing", "queuing"]  # type: ignore[union-attr]

        tasks = await dequeue_until(store, 2, "Worker-hand")
        assert sorted(t.rollout_id for t in tasks) == sorted(r.rollout_id for r in enqueued)
        assert all(t.status == "preparing" and t.attempt.status == "preparing" and t.attempt.worker_id == "Worker-hand"
                   and t.attempt.sequence_id == 1 for t in tasks)  # fmt: skip
        assert await store.dequeue_rollout(worker_id="Worker-hand") is None  # nothing left, returns without blocking

        for i, task in enumerate(tasks):
            rid, aid = task.rollout_id, task.attempt.attempt_id
            for call in range(2):
                seq = await store.get_next_span_sequence_id(rid, aid)
                assert seq == call + 1
                assert await store.add_span(llm_span(task, seq, [i, call, 1], [i, call, 2])) is not None
            assert await store.add_otel_span(rid, aid, reward_otel_span(float(i))) is not None
            done = await store.update_attempt(rid, aid, status="succeeded")
            assert done.status == "succeeded" and done.attempt_id == aid

        finished = await store.wait_for_rollouts(rollout_ids=[t.rollout_id for t in tasks], timeout=30)
        assert {r.status for r in finished} == {"succeeded"}

        trajectories = await collect(topics, "triplets", Trajectory, lambda ts: len(ts) >= 2)
        by_rollout = {t.rollout_id: t for t in trajectories}
        adapter = TracerTraceToTriplet()
        for i, task in enumerate(tasks):
            spans = await store.query_spans(task.rollout_id, "latest")  # read-your-writes: all three spans
            assert [s.sequence_id for s in spans] == [1, 2, 3] and spans.total == 3
            assert spans[2].name == semconv.AGL_ANNOTATION and spans[2].resource.attributes["agentlightning.attempt_id"] == \
                task.attempt.attempt_id  # fmt: skip
            ours = adapter.adapt(list(spans))
            theirs = by_rollout[task.rollout_id]
            assert theirs.span_count == 3 and theirs.decision == "final"
            assert [t.model_dump() for t in ours] == [t.model_dump() for t in theirs.triplets]
            assert [t.prompt_token_ids for t in ours] == [[i, 0, 1], [i, 1, 1]] and ours[-1].reward == float(i)
        answered_here(store, spans_from, len(tasks))

        # attempts and rollouts as the state machine reports them
        attempts = await store.query_attempts(tasks[0].rollout_id)
        assert [(a.attempt_id, a.status) for a in attempts] == [(tasks[0].attempt.attempt_id, "succeeded")]
        latest = await store.get_latest_attempt(tasks[0].rollout_id)
        assert latest is not None and latest.worker_id == "Worker-hand"
        page = await store.query_rollouts(status_in=["succeeded"], sort_by="rollout_id", limit=1, offset=1)
        assert page.total == 2 and len(page) == 1 and page[0].rollout_id == sorted(r.rollout_id for r in enqueued)[1]
        assert isinstance(page[0], AttemptedRollout)


@pytest.mark.parametrize("spans_from", SPAN_SOURCES)
async def test_start_rollout_and_start_attempt_bypass_the_queue(topics: Settings, spans_from: str) -> None:
    async with store_with_pipeline(topics, dequeue_poll_timeout=3.0, span_feed=span_feed(topics, spans_from)) as store:
        config = RolloutConfig(max_attempts=1)
        started = await store.start_rollout({"q": "direct"}, mode="val", config=config, worker_id="Worker-step")
        assert started.status == "preparing" and started.attempt.sequence_id == 1
        # runners of the group skip a pre-claimed task: nothing to dequeue
        assert await store.dequeue_rollout(worker_id="Worker-other") is None
        first = started.attempt.attempt_id
        seq = await store.get_next_span_sequence_id(started.rollout_id, first)
        await store.add_span(llm_span(started, seq, [1], [2]))
        await store.update_attempt(started.rollout_id, first, status="failed")
        (failed,) = await store.wait_for_rollouts(rollout_ids=[started.rollout_id], timeout=30)
        assert failed.status == "failed"
        with pytest.raises(UnsupportedOnStream, match="enqueue_rollout"):
            await store.start_attempt(started.rollout_id)  # a terminal rollout stays terminal on a stream

        other = await store.start_rollout({"q": "retry by hand"}, worker_id="Worker-step")
        retry = await store.start_attempt(other.rollout_id, worker_id="Worker-step")
        assert retry.attempt.sequence_id == 2 and retry.attempt.attempt_id != other.attempt.attempt_id
        await store.add_span(llm_span(retry, 1, [3], [4]))
        await store.update_attempt(other.rollout_id, "latest", status="succeeded")
        (done,) = await store.wait_for_rollouts(rollout_ids=[other.rollout_id], timeout=30)
        assert done.status == "succeeded"
        attempts = await store.query_attempts(other.rollout_id)
        assert [a.sequence_id for a in attempts] == [1, 2] and attempts[-1].status == "succeeded"
        spans = await store.query_spans(other.rollout_id)  # every attempt
        assert [(s.attempt_id, s.name) for s in spans] == [(retry.attempt.attempt_id, semconv.LLM_CALL_SPAN_NAME)]
        answered_here(store, spans_from, 1)


async def test_cancel_and_the_refusals(topics: Settings) -> None:
    async with store_with_pipeline(topics) as store:
        rollout = await store.enqueue_rollout({"q": 1})
        with pytest.raises(UnsupportedOnStream, match="immutable"):
            await store.update_rollout(rollout.rollout_id, config=RolloutConfig(max_attempts=3))
        with pytest.raises(UnsupportedOnStream, match="state machine"):
            await store.update_rollout(rollout.rollout_id, status="succeeded")
        with pytest.raises(UnsupportedOnStream, match="watchdog"):
            await store.update_attempt(rollout.rollout_id, "latest", status="timeout")
        cancelled = await store.update_rollout(rollout.rollout_id, status="cancelled")
        assert cancelled.status == "cancelled" and cancelled.end_time is not None
        with pytest.raises(ValueError, match="not found"):
            await store.update_attempt("ro-000000000000", "latest", status="succeeded")
        with pytest.raises(ValueError, match="not found"):
            await store.get_next_span_sequence_id(rollout.rollout_id, "at-missing0")
