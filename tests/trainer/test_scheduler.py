"""The scheduler turns a dataset into GRPO groups on agl.tasks, bounded by rollouts in flight."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.types import AttemptedRollout, RolloutSnapshot
from agl_stream_trainer.scheduler import InFlight, SchedulerConfig, TaskScheduler, load_dataset


def test_load_dataset_formats(tmp_path: Path) -> None:
    items = [{"question": "1+1", "answer": 2}, {"question": "2+2", "answer": 4}]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(items), parquet)
    assert load_dataset(jsonl) == items
    assert load_dataset(parquet) == items
    assert load_dataset(items) == items
    with pytest.raises(ValueError):
        load_dataset(tmp_path / "d.csv")


def test_epochs_shuffle_deterministically() -> None:
    sched = TaskScheduler.__new__(TaskScheduler)
    sched.items = list(range(10))
    sched.config = SchedulerConfig(shuffle=True, seed=3)
    first, second = sched.order(0), sched.order(1)
    assert sorted(first) == list(range(10)) and first != second
    assert sched.order(0) == first


async def _read_tasks(consumer: RecordConsumer, want: int, timeout: float) -> list[AttemptedRollout]:
    out: list[AttemptedRollout] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(out) < want and loop.time() < deadline:
        good, _ = await consumer.get_decoded(AttemptedRollout, timeout=0.3)
        out += [g.value for g in good]
    return out


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.mark.integration
async def test_groups_and_backpressure_from_rollout_snapshots(topics: Settings) -> None:
    settings = topics
    items = [{"q": i} for i in range(3)]
    cfg = SchedulerConfig(group_size=2, epochs=1, shuffle=False, max_in_flight=2, mode="train", resources_id="rs-x")
    tasks = RecordConsumer(settings, [settings.topic("tasks")], group_id=None)
    await tasks.start()
    async with RecordProducer(settings) as producer:
        in_flight = InFlight(settings)
        await in_flight.start()
        scheduler = TaskScheduler(settings, producer, items, cfg, in_flight=in_flight)
        run = asyncio.create_task(scheduler.run())
        try:
            first = await _read_tasks(tasks, 2, timeout=15)
            assert len(first) == 2
            # only one group fits under max_in_flight=2 until those rollouts finish
            assert await _read_tasks(tasks, 1, timeout=2) == []
            assert not run.done() and scheduler.enqueued == 2

            group_ids = {t.metadata["group_id"] for t in first}
            assert len(group_ids) == 1
            assert all(t.metadata["group_size"] == 2 and t.input == {"q": 0} and t.mode == "train" for t in first)
            assert all(t.resources_id == "rs-x" and t.attempt.rollout_id == t.rollout_id for t in first)

            for task in first:  # the state machine reports them finished
                done = task.model_copy(update={"status": "succeeded"})
                snap = RolloutSnapshot(rollout=done.model_dump(exclude={"attempt"}), attempts=1)
                await producer.send_and_wait(settings.topic("rollouts"), snap, key=task.rollout_id)
            second = await _read_tasks(tasks, 2, timeout=15)
            assert [t.input for t in second] == [{"q": 1}, {"q": 1}]
            # the scheduler moves its cursor when send_many returns, at the broker's acknowledgement, and a
            # consumer may read the records before that acknowledgement reaches the producer (CI saw cursor 1)
            await _until(lambda: scheduler.state()["cursor"] == 2, timeout=10)
            assert in_flight.count == 2
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            await in_flight.stop()
            await tasks.stop(commit=False)
