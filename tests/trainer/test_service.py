"""`agl-stream trainer` end to end: scheduler -> agl.tasks -> (a minimal runner in the test) -> agl.triplets -> learner.

The runner stand-in does what the SDK runner + adapter do for a one-call agent: it takes a task,
reads the current LLM from agl.resources, calls the embedded server (real HTTP), and writes the
trajectory (token ids, logprobs, the serving policy version) and the finished rollout snapshot.
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable

import httpx
import pytest
import yaml

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.types import AttemptedRollout, ResourcesUpdate, RolloutSnapshot, TrainingRun, TrainingStep, Trajectory, Triplet
from agl_stream_trainer.checkpoint import CheckpointManager
from agl_stream_trainer.config import TrainerConfig
from agl_stream_trainer.service import TrainerService

pytestmark = pytest.mark.integration


def _length_parity(task: AttemptedRollout, token_ids: list[int]) -> float:
    return float(len(token_ids) % 2)


async def _runner(settings: Settings, stop: asyncio.Event, versions_seen: list[int],
                  reward_of: Callable[[AttemptedRollout, list[int]], float] = _length_parity) -> None:  # fmt: skip
    tasks = RecordConsumer(settings, [settings.topic("tasks")], group_id=settings.group("runners"))
    resources = RecordConsumer(settings, [settings.topic("resources")], group_id=None)
    await tasks.start()
    await resources.start()
    llm = None
    async with RecordProducer(settings) as producer, httpx.AsyncClient(timeout=120) as client:
        try:
            while not stop.is_set():
                for item in (await resources.get_decoded(ResourcesUpdate, timeout=0.1))[0]:
                    if item.key == "latest":
                        llm = item.value.resources["main_llm"]
                good, _ = await tasks.get_decoded(AttemptedRollout, timeout=0.2)
                for item in good:
                    while llm is None:
                        for res in (await resources.get_decoded(ResourcesUpdate, timeout=0.2))[0]:
                            llm = res.value.resources["main_llm"] if res.key == "latest" else llm
                    task = item.value
                    reply = (await client.post(llm.endpoint + "/completions", json={
                        "model": llm.model, "prompt": f"Question {task.input['q']}:", "max_tokens": 6, "logprobs": 0,
                    })).json()
                    choice = reply["choices"][0]
                    versions_seen.append(reply["policy_version"])
                    reward = reward_of(task, choice["token_ids"])
                    traj = Trajectory(
                        rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id,
                        group_id=task.metadata["group_id"], mode=task.mode, final_reward=reward,
                        triplets=[Triplet(prompt={"token_ids": reply["prompt_token_ids"]},
                                          response={"token_ids": choice["token_ids"],
                                                    "logprobs": choice["logprobs"]["token_logprobs"]},
                                          reward=reward, policy_version=reply["policy_version"])],
                        metadata={"group_size": task.metadata["group_size"]},
                    )
                    await producer.send_and_wait(settings.topic("triplets"), traj, key=task.rollout_id)
                    done = task.model_copy(update={"status": "succeeded"}).model_dump(exclude={"attempt"})
                    await producer.send_and_wait(settings.topic("rollouts"), RolloutSnapshot(rollout=done, attempts=1),
                                                 key=task.rollout_id)
                    tasks.done(item.record)
                await tasks.commit()
        finally:
            await tasks.stop()
            await resources.stop(commit=False)


async def test_trainer_service_trains_on_scheduled_rollouts(topics: Settings, tiny_model_dir, tmp_path) -> None:
    settings = topics
    dataset = tmp_path / "data.jsonl"
    dataset.write_text("".join(f'{{"q": {i}}}\n' for i in range(6)))
    config_file = tmp_path / "trainer.yaml"
    config_file.write_text(yaml.safe_dump({
        "run_id": "svc",
        "model": str(tiny_model_dir),
        "engine": {"kind": "embedded", "model_name": "tiny"},
        "algorithm": {"estimator": "grpo"},
        "optim": {"lr": 1e-3},
        # rewards are a coin flip of the reply's length: many groups tie, and this test wants its two steps
        "batcher": {"group_size": 2, "batch_groups": 1, "max_staleness": 4, "drop_zero_variance": False},
        "scheduler": {"dataset": str(dataset), "group_size": 2, "max_in_flight": 4, "shuffle": False},
        "checkpoint_every": 1,
        "max_steps": 2,
        "metrics": {"topic": True, "progress": False},
    }))
    config = TrainerConfig.from_yaml(config_file)
    stop = asyncio.Event()
    versions_seen: list[int] = []
    runner = asyncio.create_task(_runner(settings, stop, versions_seen))
    service = TrainerService(settings, config)
    try:
        await asyncio.wait_for(service.run(), timeout=150)
    finally:
        stop.set()
        await asyncio.gather(runner, return_exceptions=True)
    assert service.learner is not None and service.learner.policy_version == 2
    state = CheckpointManager(settings.data_dir / "checkpoints" / "svc").load(service.learner.policy)
    assert state is not None and state.policy_version == 2 and state.extra["scheduler"]["cursor"] >= 2
    assert versions_seen and versions_seen[0] == 0

    async with RecordConsumer(settings, [settings.topic("training_steps")], group_id=None) as steps:
        published: list = []
        for _ in range(25):
            published += (await steps.get_decoded(TrainingStep, timeout=0.2))[0]
            if len(published) >= 2:
                break
    assert [(s.key, s.value.step, s.value.policy_version, s.value.total_steps) for s in published] == [
        ("svc", 1, 1, 2), ("svc", 2, 2, 2)
    ]  # fmt: skip


def _service_config(tmp_path, tiny_model_dir, items: list[dict], **batcher) -> TrainerConfig:
    dataset = tmp_path / "data.jsonl"
    dataset.write_text("".join(json.dumps(item) + "\n" for item in items))
    return TrainerConfig.model_validate({
        "run_id": "dyn", "model": str(tiny_model_dir), "engine": {"kind": "embedded", "model_name": "tiny"},
        "algorithm": {"estimator": "grpo"}, "optim": {"lr": 1e-3},
        "batcher": {"group_size": 2, "batch_groups": 1, "max_staleness": 4, **batcher},
        "scheduler": {"dataset": str(dataset), "group_size": 2, "max_in_flight": 4, "shuffle": False},
        "checkpoint_every": 0, "max_steps": 3, "idle_timeout_s": 10, "metrics": {"topic": True, "progress": False},
    })  # fmt: skip


async def _train_with_runner(topics: Settings, config: TrainerConfig) -> TrainerService:
    """Run the trainer service to its end beside the stand-in runner scoring with :func:`_flat_or_split`."""
    stop, versions = asyncio.Event(), []
    runner = asyncio.create_task(_runner(topics, stop, versions, _flat_or_split))
    service = TrainerService(topics, config)
    try:
        await asyncio.wait_for(service.run(), timeout=150)
    finally:
        stop.set()
        await asyncio.gather(runner, return_exceptions=True)
    return service


def _flat_or_split(task: AttemptedRollout, token_ids: list[int]) -> float:
    """Items marked flat earn 0 for every member (no signal); the others split their group 1 / 0."""
    return 0.0 if task.input["flat"] else float(task.metadata["group_member"] % 2)


async def test_dynamic_sampling_trains_only_groups_with_signal(topics: Settings, tiny_model_dir, tmp_path) -> None:
    """On the local stack: GRPO's default leaves out the all-equal groups, counts them per step in
    agl.training_steps, and fills every batch with groups whose rewards differ."""
    items = [{"q": i, "flat": i % 3 != 2} for i in range(12)]  # two flat groups before each split one
    config = _service_config(tmp_path, tiny_model_dir, items)
    assert config.batcher.drop_zero_variance is True  # the default for grpo
    service = await _train_with_runner(topics, config)
    assert service.learner is not None and service.learner.step == 3 and service.stop_reason == "max_steps"
    history = service.learner.metrics.history
    assert [m.extra["signal_groups"] for m in history] == [1.0, 1.0, 1.0]
    assert all(m.extra["effective_batch_size"] == m.num_sequences == 2 and m.grad_norm > 0 for m in history)
    # how many flat groups each step saw depends on arrival order across partitions; together they are all
    # the flat groups that arrived before the third batch (the scheduler enqueues two before each split one)
    left_out = [m.extra["zero_variance_groups"] for m in history]
    assert sum(left_out) >= 2 and sum(left_out) <= service.learner.batcher.stats.zero_variance_groups
    assert [m.extra["zero_variance_fraction"] for m in history] == pytest.approx([z / (z + 1) for z in left_out])

    async with RecordConsumer(topics, [topics.topic("training_steps")], group_id=None) as steps:
        published: list = []
        for _ in range(25):
            published += (await steps.get_decoded(TrainingStep, timeout=0.2))[0]
            if len(published) >= 3:
                break
    assert [s.value.extra["zero_variance_groups"] for s in published] == left_out


async def test_a_task_without_signal_ends_with_a_clear_reason(topics: Settings, tiny_model_dir, tmp_path) -> None:
    items = [{"q": i, "flat": True} for i in range(8)]
    config = _service_config(tmp_path, tiny_model_dir, items, max_zero_variance_groups=3)
    service = await _train_with_runner(topics, config)
    assert service.learner is not None and service.learner.step == 0
    assert service.stop_reason is not None and service.stop_reason.startswith("no learning signal: 3 groups in a row")
    assert "(3 at reward 0)" in service.stop_reason
    assert service.shortfall is not None and service.shortfall.startswith("0 learner steps of 3 asked: all 3 groups had equal rewards (3 at 0)")


async def test_a_dataset_that_ends_before_any_signal_says_it_trained_nothing_and_why(topics: Settings, tiny_model_dir,
                                                                                   tmp_path) -> None:
    """What a new user met: a job ended 'dataset done' after 0 steps, every group's rewards equal, and said nothing."""
    items = [{"q": i, "flat": True} for i in range(4)]  # 4 groups, fewer than max_zero_variance_groups
    config = _service_config(tmp_path, tiny_model_dir, items)
    service = await _train_with_runner(topics, config)
    assert service.learner is not None and service.learner.step == 0 and service.stop_reason == "dataset done"
    assert service.shortfall == ("0 learner steps of 3 asked: all 4 groups had equal rewards (4 at 0), so GRPO had no "
                                 "advantage to learn from (stopped: dataset done)")  # fmt: skip
    # ... and so does the run's record on agl.training_runs, which the dashboard's "Training runs" panel lists
    async with RecordConsumer(topics, [topics.topic("training_runs")], group_id=None) as runs:
        published: list = []
        for _ in range(25):
            published += (await runs.get_decoded(TrainingRun, timeout=0.2))[0]
            if len(published) >= 2:
                break
    start, end = (record.value for record in published)
    assert (start.run_id, start.status, start.steps, start.ended_at) == ("dyn", "running", 0, None)
    assert (end.status, end.steps, end.asked_steps, end.stop_reason) == ("finished", 0, 3, "dataset done")
    assert end.shortfall == service.shortfall and end.equal_reward_groups == 4 and end.trained_groups == 0
    assert end.started_at == start.started_at and end.ended_at is not None and end.updated_at >= start.updated_at


async def test_a_time_budget_stops_training_between_steps(topics: Settings, tiny_model_dir, tmp_path) -> None:
    items = [{"q": i, "flat": False} for i in range(40)]
    config = _service_config(tmp_path, tiny_model_dir, items).model_copy(update={"max_steps": 1000, "max_train_seconds": 4.0})
    service = await _train_with_runner(topics, config)
    assert service.stop_reason == "time budget: 4s of training"
    assert service.learner is not None and service.learner.step < 1000
