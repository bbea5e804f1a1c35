"""`agl-stream trainer` end to end: scheduler -> agl.tasks -> (a minimal runner in the test) -> agl.triplets -> learner.

The runner stand-in does what the SDK runner + adapter do for a one-call agent: it takes a task,
reads the current LLM from agl.resources, calls the embedded server (real HTTP), and writes the
trajectory (token ids, logprobs, the serving policy version) and the finished rollout snapshot.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import yaml

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.types import AttemptedRollout, ResourcesUpdate, RolloutSnapshot, TrainingStep, Trajectory, Triplet
from agl_stream_trainer.checkpoint import CheckpointManager
from agl_stream_trainer.config import TrainerConfig
from agl_stream_trainer.service import TrainerService

pytestmark = pytest.mark.integration


async def _runner(settings: Settings, stop: asyncio.Event, versions_seen: list[int]) -> None:
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
                    reward = float(len(choice["token_ids"]) % 2)
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
        "batcher": {"group_size": 2, "batch_groups": 1, "max_staleness": 4},
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
