"""Fixtures and builders shared by the ClickHouse, sink, analytics and dashboard tests.

``store_dsn`` is parametrized over both transports: the embedded engine (always) and a real
server over HTTP when ``AGL_TEST_CLICKHOUSE_URL`` is set (each test gets its own database there).
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Iterator, Optional

import pytest

from agl_stream.config import Settings
from agl_stream.types import (
    Attempt,
    AttemptEvent,
    Event,
    Link,
    OtelResource,
    Rollout,
    RolloutSnapshot,
    Span,
    SpanContext,
    TraceStatus,
    Trajectory,
    Triplet,
)
from agl_stream_processors.clickhouse import ClickHouse, connect, migrate

HTTP_ENV = "AGL_TEST_CLICKHOUSE_URL"


@pytest.fixture(params=["chdb", "http"])
def store_dsn(request: pytest.FixtureRequest, settings: Settings) -> Iterator[str]:
    """A DSN of an empty database on each transport (http only when AGL_TEST_CLICKHOUSE_URL is set)."""
    if request.param == "chdb":
        yield settings.effective_clickhouse_dsn
        return
    base = os.environ.get(HTTP_ENV)
    if not base:
        pytest.skip(f"{HTTP_ENV} is not set (point it at a ClickHouse server to test the HTTP transport)")
    dsn = f"{base.rstrip('/')}/agl_t{secrets.token_hex(4)}"
    yield dsn
    with connect(dsn) as ch:
        ch.command(f"DROP DATABASE IF EXISTS {ch.database}")


@pytest.fixture
def store_settings(settings: Settings, store_dsn: str) -> Settings:
    return settings.model_copy(update={"clickhouse_dsn": store_dsn})


@pytest.fixture
def ch(store_dsn: str) -> Iterator[ClickHouse]:
    """A migrated store, closed after the test (chdb allows one open data directory per process)."""
    client = connect(store_dsn)
    migrate(client)
    try:
        yield client
    finally:
        client.close()


def make_span(
    rollout_id: str = "ro-000000000001",
    attempt_id: str = "at-00000001",
    sequence_id: int = 1,
    *,
    span_id: Optional[str] = None,
    parent_id: Optional[str] = None,
    name: str = "openai.chat.completion",
    attributes: Optional[dict] = None,
    start_time: Optional[float] = 1_700_000_000.25,
    end_time: Optional[float] = 1_700_000_001.5,
) -> Span:
    trace_id = "ab" * 16
    span_id = span_id or f"{sequence_id:016x}"
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name=name,
        attributes=attributes if attributes is not None else {"gen_ai.request.model": "tiny"},
        start_time=start_time,
        end_time=end_time,
        context=SpanContext(trace_id=trace_id, span_id=span_id),
        parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
    )


def rich_span() -> Span:
    """A span using every field: typed attributes, events, links, resource, status, kind."""
    span = make_span(
        sequence_id=7,
        parent_id="00000000000000aa",
        attributes={
            "gen_ai.request.model": "tiny",
            "prompt_token_ids": [1, 2, 3],
            "response_token_ids": [],
            "agentlightning.reward.0.value": 0.5,
            "flag": True,
            "count": 3,
            "nested": {"a": [1, "x"]},
            "numeric_string": "42",
        },
    )
    return span.model_copy(
        update={
            "status": TraceStatus(status_code="ERROR", description="boom"),
            "events": [
                Event(name="exception", attributes={"exception.message": "x", "n": 1}, timestamp=1_700_000_000.75),
                Event(name="no-time", attributes={}),
            ],
            "links": [
                Link(
                    context=SpanContext(trace_id="cd" * 16, span_id="ef" * 8, trace_state={"k": "v", "z": "1"}),
                    attributes={"why": "follows", "w": 2.5},
                )
            ],
            "resource": OtelResource(
                attributes={"service.name": "agent", "agentlightning.span_sequence_id": 7}, schema_url="https://x/s"
            ),
            "kind": "CLIENT",
            "context": SpanContext(trace_id="ab" * 16, span_id=span.span_id, trace_state={"vendor": "1"}),
        }
    )


def make_trajectory(
    rollout_id: str, attempt_id: str = "at-00000001", n: int = 2, *, reward: float = 1.0, policy_version: int = 3
) -> Trajectory:
    return Trajectory(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        group_id="g-1",
        mode="train",
        resources_id="rs-1",
        final_reward=reward,
        adapter="TracerTraceToTriplet",
        span_count=3 * n,
        finished_at=time.time(),
        triplets=[
            Triplet(
                prompt={"token_ids": [1, 2, 3 + i]},
                response={"token_ids": [7, 8], "logprobs": [-0.5, -0.25]},
                reward=reward if i == n - 1 else None,
                policy_version=policy_version,
            )
            for i in range(n)
        ],
    )


def make_evaluations() -> list[Trajectory]:
    """Two held-out items answered twice, before training (policy version 0) and after (version 2).

    Right answers (the ``correct`` reward dimension): before [1, 0] and [0, 0] (accuracy 0.25, pass@2
    0.5); after [1, 1] and [1, 0] (accuracy 0.75, pass@2 1.0). Every answer's ``format`` part is 0.5."""
    out = []
    for label, version, right in (("before", 0, [[1, 0], [0, 0]]), ("after", 2, [[1, 1], [1, 0]])):
        for item, samples in enumerate(right):
            for sample, correct in enumerate(samples):
                rid = f"ro-e{version}{item}{sample}000000000"[:15]
                traj = make_trajectory(rid, n=1, reward=float(correct), policy_version=version)
                out.append(traj.model_copy(update={"mode": "val", "group_id": None, "metadata": {
                    "reward_dimensions": {"correct": float(correct), "format": 0.5},
                    "rollout_metadata": {"eval": label, "item_index": item, "sample": sample}}}))  # fmt: skip
    return out


def make_snapshot(rollout_id: str, status: str = "succeeded", attempts: int = 1, *, updated_at: float = 0.0) -> RolloutSnapshot:
    now = time.time()
    return RolloutSnapshot(
        rollout=Rollout(rollout_id=rollout_id, input={"q": rollout_id[-1]}, start_time=now - 2, mode="train", status=status),  # type: ignore[arg-type]
        attempt=Attempt(rollout_id=rollout_id, attempt_id="at-00000001", sequence_id=attempts, status="succeeded"),
        attempts=attempts,
        updated_at=updated_at or now,
    )


def make_attempt_events(rollout_id: str, attempt_id: str = "at-00000001", *, t0: Optional[float] = None) -> list[AttemptEvent]:
    t0 = t0 or time.time() - 1
    return [
        AttemptEvent(kind="started", rollout_id=rollout_id, attempt_id=attempt_id, timestamp=t0, worker_id="w-1"),
        AttemptEvent(
            kind="finished", rollout_id=rollout_id, attempt_id=attempt_id, timestamp=t0 + 0.5, status="succeeded", span_count=3
        ),
    ]


def insert_records(ch: ClickHouse, sink_name: str, values: list) -> None:
    """Insert records the way the named sink would (same row conversion), without Kafka."""
    from agl_stream_processors.clickhouse.columns import ColumnBatch
    from agl_stream_processors.sinks.specs import SINKS

    spec = SINKS[sink_name]
    batch = ColumnBatch(spec.schema)
    for value in values:
        batch.rows.extend(spec.to_rows(value, int(time.time() * 1000)))
    ch.insert_arrow(spec.table, batch.to_arrow())


def populate(ch: ClickHouse) -> dict[str, list[str]]:
    """A small, known data set in every table: 4 succeeded rollouts, 1 failed after 2 attempts, 1 running."""
    from agl_stream.types import DeadLetter, LLM, ResourcesUpdate, TrainingRun, Worker

    now = time.time()
    done = [f"ro-{i:012x}" for i in range(4)]
    failed, running = "ro-00000000000f", "ro-0000000000aa"
    snapshots = [make_snapshot(r, updated_at=now) for r in done]
    fail = make_snapshot(failed, "failed", attempts=2, updated_at=now)
    snapshots.append(fail)
    snapshots.append(make_snapshot(running, "running", updated_at=now))
    insert_records(ch, "rollouts", snapshots)
    events = [e for r in done for e in make_attempt_events(r, t0=now - 1)]
    failed_events = make_attempt_events(failed, t0=now - 1)
    failed_events[1] = failed_events[1].model_copy(update={"status": "failed", "error": "ValueError: bad answer"})
    insert_records(ch, "attempts", events + failed_events)
    trajectories = [
        make_trajectory(r, n=2, reward=float(i % 2), policy_version=1 + i // 2).model_copy(update={"resources_id": "rs-1"})
        for i, r in enumerate(done)
    ]
    insert_records(ch, "triplets", trajectories + make_evaluations())
    insert_records(ch, "spans", [make_span(r, sequence_id=s, start_time=now - 1 + s / 10, end_time=now) for r in done for s in (1, 2, 3)])
    llm = LLM(endpoint="http://x/v1", model="m", policy_version=2)
    insert_records(ch, "resources", [ResourcesUpdate(resources_id="rs-1", resources={"main_llm": llm}, version=1)])
    insert_records(ch, "workers", [Worker(worker_id="w-1", status="busy", last_heartbeat_time=now, current_rollout_id=running)])
    insert_records(ch, "dlq", [DeadLetter(source_topic="agl.spans", partition=0, offset=1, payload=b"x", reason="not JSON", processor="sink-spans")])
    ch.command(
        "INSERT INTO training_steps (RunId, Step, PolicyVersion, Timestamp, Loss, RewardMean, KL, NumTriplets, Extra) VALUES "
        "('run-1', 1, 1, now64(3), 0.5, 0.25, 0.01, 8, map('clip_frac', 0.1)), ('run-1', 2, 2, now64(3), 0.4, 0.5, 0.02, 8, map())"
    )
    insert_records(ch, "training_runs", [
        TrainingRun(run_id="run-1", status="running", started_at=now - 60, updated_at=now - 60, asked_steps=2),
        TrainingRun(run_id="run-1", status="finished", started_at=now - 60, updated_at=now - 1, ended_at=now - 1, steps=2,
                    asked_steps=2, policy_version=2, stop_reason="max_steps", algorithm="grpo", aggregation="trajectory",
                    trained_groups=4),
        TrainingRun(run_id="run-flat", status="finished", started_at=now - 30, updated_at=now, ended_at=now, asked_steps=3,
                    stop_reason="dataset done", algorithm="grpo", aggregation="transition", equal_reward_groups=4,
                    shortfall="0 learner steps of 3 asked: all 4 groups had equal rewards (4 at 0), so GRPO had no "
                              "advantage to learn from (stopped: dataset done)"),
    ])  # fmt: skip
    return {"succeeded": done, "failed": [failed], "running": [running]}
