"""One populated instance of every topic record model (shared by serialization and broker tests)."""

from __future__ import annotations

from pydantic import BaseModel

from agl_stream import (
    LLM,
    Attempt,
    AttemptedRollout,
    AttemptEvent,
    DeadLetter,
    Event,
    OtelResource,
    PromptTemplate,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutControl,
    RolloutSnapshot,
    Span,
    SpanContext,
    TraceStatus,
    Trajectory,
    Triplet,
    Worker,
)
from agl_stream.types import DatasetLine, TrainingRun, TrainingStep

_rollout = Rollout(
    rollout_id="ro-0123456789ab",
    input={"question": "2+2?", "nested": {"k": [1, 2.5, None]}},
    mode="train",
    resources_id="rs-1",
    config=RolloutConfig(timeout_seconds=30, unresponsive_seconds=5, max_attempts=3, retry_condition=["timeout"]),
    metadata={"group_id": "gr-1"},
)
_attempt = Attempt(rollout_id=_rollout.rollout_id, attempt_id="at-01234567", sequence_id=2, worker_id="Worker-0")

SAMPLES: dict[type[BaseModel], BaseModel] = {
    AttemptedRollout: AttemptedRollout(**_rollout.model_dump(), attempt=_attempt),
    AttemptEvent: AttemptEvent(
        kind="finished", rollout_id=_rollout.rollout_id, attempt_id="at-01234567", status="failed", error="boom", span_count=7
    ),
    RolloutSnapshot: RolloutSnapshot(rollout=_rollout, attempt=_attempt, attempts=2),
    RolloutControl: RolloutControl(rollout_id=_rollout.rollout_id, reason="operator"),
    Span: Span(
        rollout_id=_rollout.rollout_id,
        attempt_id="at-01234567",
        sequence_id=3,
        trace_id="0" * 32,
        span_id="1" * 16,
        parent_id="2" * 16,
        name="openai.chat.completion",
        status=TraceStatus(status_code="OK"),
        attributes={"prompt_token_ids": [1, 2, 3], "gen_ai.request.model": "m", "x.y": 1.5, "ünï": "çødé"},
        events=[Event(name="e", attributes={"a": 1}, timestamp=1.0)],
        start_time=1.0,
        end_time=2.0,
        context=SpanContext(trace_id="0" * 32, span_id="1" * 16),
        resource=OtelResource(attributes={"agentlightning.rollout_id": _rollout.rollout_id}),
    ),
    ResourcesUpdate: ResourcesUpdate(
        resources_id="rs-1",
        version=4,
        resources={"main_llm": LLM(endpoint="http://x/v1", model="m", policy_version=4), "p": PromptTemplate(template="{q}")},
    ),
    Trajectory: Trajectory(
        rollout_id=_rollout.rollout_id,
        attempt_id="at-01234567",
        group_id="gr-1",
        mode="train",
        final_reward=1.0,
        triplets=[Triplet(prompt={"token_ids": [1, 2]}, response={"token_ids": [3], "logprobs": [-0.5]}, reward=1.0, policy_version=2)],
    ),
    Worker: Worker(worker_id="Worker-0", status="busy", heartbeat_stats={"cpu": 0.5}, current_rollout_id=_rollout.rollout_id),
    DeadLetter: DeadLetter(source_topic="agl.spans", partition=1, offset=9, key=b"k", payload=b"\xff\x00raw", reason="bad"),
    TrainingStep: TrainingStep(
        run_id="run-1", step=3, policy_version=3, total_steps=10, loss=0.25, kl=0.01, reward_mean=0.5,
        staleness_histogram={0: 6, 1: 2}, extra={"pg_clipfrac": 0.1},
    ),
    TrainingRun: TrainingRun(run_id="run-1", status="finished", started_at=1700000000.0, ended_at=1700000100.0, steps=0,
                             asked_steps=3, stop_reason="dataset done", equal_reward_groups=4,
                             shortfall="0 learner steps of 3 asked: all 4 groups had equal rewards (4 at 0)"),
    DatasetLine: DatasetLine(data_id="arith", split="train", line=2, lines=5, item='{"question": "2+2?", "ground_truth": "4"}',
                             file_name="train.jsonl", uploaded_at=1700000000.5),
}
