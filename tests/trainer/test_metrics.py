"""Learner metrics travel over agl.training_steps to the training_steps table the dashboards read."""

from __future__ import annotations

import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.types import TrainingStep
from agl_stream_trainer.metrics import MetricsHub, StepMetrics, TopicSink

pytestmark = pytest.mark.integration


def _metrics(step: int) -> StepMetrics:
    return StepMetrics(
        step=step, policy_version=step, loss=0.5 / step, policy_loss=0.4, kl=0.01, entropy=2.5, reward_mean=0.6,
        reward_std=0.2, advantage_mean=0.0, advantage_std=1.0, grad_norm=0.9, tokens_per_second=1234.5,
        staleness_mean=0.5, publish_seconds=0.12, num_triplets=16, num_sequences=16, learning_rate=1e-6,
        staleness_histogram={0: 8, 1: 8}, extra={"pg_clipfrac": 0.1},
    )


async def test_topic_sink_publishes_steps_the_training_steps_sink_stores(topics: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Learner -> agl.training_steps -> sink -> training_steps table: the learner never opens ClickHouse."""
    from agl_stream_processors.clickhouse import connect, migrate
    from agl_stream_processors.sinks import SinkOptions, run_sinks

    async with RecordProducer(topics) as producer:
        sink = TopicSink(producer, topics, run_id="run-a", total_steps=10)
        hub = MetricsHub([sink])
        hub.write(_metrics(1))
        hub.write(_metrics(2))
        await hub.drain()
        hub.close()
    assert sink.failed == 0
    async with RecordConsumer(topics, [topics.topic("training_steps")], group_id=None) as consumer:
        good: list = []
        for _ in range(50):
            good += (await consumer.get_decoded(TrainingStep, timeout=0.2))[0]
            if len(good) == 2:
                break
    assert [(g.key, g.value.step, g.value.total_steps) for g in good] == [("run-a", 1, 10), ("run-a", 2, 10)]

    with connect(topics.effective_clickhouse_dsn) as ch:
        migrate(ch)
        await run_sinks(topics, ["training_steps"], ch=ch, options=SinkOptions(max_wait=0.2, poll_timeout=0.2), idle_exit=1.0)
        _cols, rows = ch.query_rows(
            "SELECT Step, PolicyVersion, Loss, TokensPerSecond, NumTriplets, Extra['pg_clipfrac'], Extra['staleness_1'], "
            "Extra['total_steps'], PublishSeconds FROM training_steps FINAL WHERE RunId = 'run-a' ORDER BY Step"
        )
    assert [r[0] for r in rows] == [1, 2] and [r[1] for r in rows] == [1, 2]
    assert rows[1][2] == pytest.approx(0.25) and rows[0][3] == pytest.approx(1234.5) and rows[0][4] == 16
    assert rows[0][5] == pytest.approx(0.1) and rows[0][6] == 8 and rows[0][7] == 10 and rows[0][8] == pytest.approx(0.12)


async def test_a_step_the_broker_refuses_is_counted_and_training_goes_on(topics: Settings) -> None:
    class Refusing:
        async def send_and_wait(self, *args: object, **kwargs: object) -> None:
            raise ConnectionError("broker gone")

    sink = TopicSink(Refusing(), topics, run_id="run-b")
    hub = MetricsHub([sink])
    hub.write(_metrics(1))
    await hub.drain()
    assert sink.failed == 1 and hub.history[-1].step == 1


def test_a_failing_sink_does_not_stop_the_others() -> None:
    class Broken:
        def write(self, m: StepMetrics) -> None:
            raise RuntimeError("down")

        def close(self) -> None:
            pass

    class Keep:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def write(self, m: StepMetrics) -> None:
            self.steps.append(m.step)

        def close(self) -> None:
            pass

    keep = Keep()
    hub = MetricsHub([Broken(), keep])
    hub.write(_metrics(1))
    assert keep.steps == [1] and hub.history[-1].step == 1


def test_jsonl_steps_name_the_rollouts_they_trained_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Fault-injection audits rebuild the training history from this file across learner restarts."""
    from agl_stream_trainer.metrics import JsonlSink, read_jsonl_metrics

    sink = JsonlSink(tmp_path / "steps.jsonl")
    first, second = _metrics(1), _metrics(2)
    second.rollout_ids = ["ro-b-0", "ro-b-1"]
    sink.write(first)
    sink.write(second)
    sink.close()
    rows = read_jsonl_metrics(tmp_path / "steps.jsonl")
    assert [r.step for r in rows] == [1, 2]
    assert rows[0].rollout_ids == [] and rows[1].rollout_ids == ["ro-b-0", "ro-b-1"]
    assert rows[1].staleness_histogram == {0: 8, 1: 8} and "rollout_ids" not in rows[1].flat()
