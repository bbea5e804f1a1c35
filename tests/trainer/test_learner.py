"""The learner end to end on the real broker: triplets in, a GRPO step, weights published to the embedded server."""

from __future__ import annotations

import copy

import httpx
import pytest
import torch
from safetensors.torch import load_file

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer
from agl_stream.types import ResourcesUpdate
from agl_stream_trainer.algorithms.batch import collate, rows_from_trajectories
from agl_stream_trainer.algorithms.grpo import GRPOConfig, evaluate, prepare
from agl_stream_trainer.backends.hf import HFPolicy, OptimConfig
from agl_stream_trainer.batching import BatcherConfig
from agl_stream_trainer.checkpoint import CheckpointManager
from agl_stream_trainer.engines.embedded import EmbeddedEngine, EmbeddedServer
from agl_stream_trainer.engines.generation import Generator
from agl_stream_trainer.learner import Learner
from agl_stream_trainer.publisher import WeightPublisher

from .conftest import make_group, produce_trajectories

pytestmark = pytest.mark.integration


async def _latest_resources(settings: Settings, key: str = "latest", timeout: float = 10.0) -> ResourcesUpdate:
    consumer = RecordConsumer(settings, [settings.topic("resources")], group_id=None)
    await consumer.start()
    found = None
    try:
        for _ in range(int(timeout / 0.5)):
            good, _ = await consumer.get_decoded(ResourcesUpdate, timeout=0.5)
            for item in good:
                if item.key == key:
                    found = item.value
            if found is not None and not good:
                break
    finally:
        await consumer.stop(commit=False)
    assert found is not None, "no ResourcesUpdate on agl.resources"
    return found


async def test_grpo_step_from_real_triplets_then_publish(topics: Settings, tiny, tiny_model_dir) -> None:
    settings = topics
    model, tokenizer = tiny
    trajectories = make_group("g1", [1.0, 0.0, 0.0, 1.0], seed=11) + make_group("g2", [0.0, 1.0, 0.5, 0.0], seed=12)
    await produce_trajectories(settings, trajectories)

    # the embedded server runs its own copy of the initial weights
    from agl_stream_trainer.models import load_model_and_tokenizer

    served_model, served_tok, _ = load_model_and_tokenizer(str(tiny_model_dir))
    generator = Generator(served_model, served_tok)
    server = EmbeddedServer(generator, "tiny").start()
    producer = await RecordProducer(settings).start()
    try:
        engine = EmbeddedEngine(server.base_url, "tiny", generator=generator)
        publisher = WeightPublisher(engine, producer, settings, resources_id="policy")
        await publisher.announce(0)
        algo = GRPOConfig()
        policy = HFPolicy(model, OptimConfig(lr=1e-3))
        before_model = copy.deepcopy(model)
        learner = Learner(settings, policy, tokenizer, algo, BatcherConfig(group_size=4, batch_groups=2, max_staleness=1),
                          publisher=publisher)
        await learner.start()
        try:
            metrics = await learner.step_once(timeout=60)
        finally:
            await learner.stop()
        assert metrics is not None and learner.policy_version == 1
        assert metrics.num_sequences == 8 and metrics.num_triplets == 8
        assert {t.rollout_id for t in learner.last_batch.trajectories} == {t.rollout_id for t in trajectories}

        # the weights changed ...
        changed = [n for n, p in model.named_parameters() if not torch.equal(p, dict(before_model.named_parameters())[n])]
        assert changed
        # ... and the loss on that same batch went down (same pi_old and advantages, new weights)
        batch = collate(rows_from_trajectories(learner.last_batch.trajectories), tokenizer.pad_token_id)
        old_policy = HFPolicy(before_model, OptimConfig(lr=1e-3))
        prep = prepare(old_policy, batch, algo)
        assert float(evaluate(policy, prep, algo).loss) < float(evaluate(old_policy, prep, algo).loss)

        # the server now answers with version 1, on the learner's weights
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            resp = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert resp.status_code == 200
        assert resp.headers["x-agl-policy-version"] == "1" and resp.json()["policy_version"] == 1
        for name, param in model.state_dict().items():
            assert torch.equal(served_model.state_dict()[name], param), name

        # ... and agl.resources announces it
        update = await _latest_resources(settings)
        llm = update.resources["main_llm"]
        assert update.version == 1 and llm.policy_version == 1
        assert llm.endpoint == server.base_url + "/v1" and llm.model == "tiny"
        by_id = await _latest_resources(settings, key="policy")
        assert by_id.resources["main_llm"].policy_version == 1
    finally:
        await producer.stop()
        server.stop()
        generator.close()


async def test_stale_triplets_never_reach_the_optimizer(topics: Settings, tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = topics
    model, tokenizer = tiny
    # learner at version 5, bound 1: versions 3 are stale, 4 and 5 are fine
    fresh = make_group("fresh", [1.0, 0.0, 1.0], seed=1, versions=[5, 4, 5])
    mixed = make_group("mixed", [1.0, 0.0, 0.5], seed=2, versions=[3, 4, 3])  # only one usable member -> dropped
    await produce_trajectories(settings, fresh + mixed)

    seen_versions: list[int] = []
    import agl_stream_trainer.learner as learner_module

    real_step = learner_module.train_step

    def spy(policy, batch, cfg, ref_model=None):  # records what reaches the optimizer
        seen_versions.extend(batch.policy_versions.tolist())
        return real_step(policy, batch, cfg, ref_model)

    monkeypatch.setattr(learner_module, "train_step", spy)
    learner = Learner(settings, HFPolicy(model, OptimConfig(lr=1e-4)), tokenizer, GRPOConfig(),
                      BatcherConfig(group_size=3, batch_groups=1, max_staleness=1, min_group_size=2, group_timeout_s=600))
    learner.policy_version = 5
    await learner.start(resume=False)
    try:
        metrics = await learner.step_once(timeout=30)
        assert metrics is not None
        assert await learner.step_once(timeout=2) is None  # the mixed group was dropped, nothing else to train
    finally:
        await learner.stop()
    assert sorted(seen_versions) == [4, 5, 5]
    stats = learner.batcher.stats
    assert stats.stale_triplets == 2 and stats.stale_trajectories == 2 and stats.dropped_groups == 1
    assert metrics.staleness_histogram == {0: 2, 1: 1}


async def test_checkpoint_kill_resume_continues_version_and_offsets(topics: Settings, tiny_model_dir, tmp_path) -> None:
    settings = topics
    from agl_stream_trainer.models import load_model_and_tokenizer

    groups = [make_group(f"c{i}", [1.0, 0.0], seed=20 + i) for i in range(3)]
    for g in groups:  # one group per partition key set; order within a partition is kept
        await produce_trajectories(settings, g)
    cfg = BatcherConfig(group_size=2, batch_groups=1, max_staleness=None)
    ckpt_dir = tmp_path / "ckpt"

    model, tokenizer, _ = load_model_and_tokenizer(str(tiny_model_dir))
    first = Learner(settings, HFPolicy(model, OptimConfig(lr=1e-3)), tokenizer, GRPOConfig(), cfg,
                    checkpoints=CheckpointManager(ckpt_dir), checkpoint_every=2)
    await first.start()
    trained_first: list[set[str]] = []
    for _ in range(3):
        assert await first.step_once(timeout=30) is not None
        trained_first.append({t.group_id for t in first.last_batch.trajectories})
    latest = CheckpointManager(ckpt_dir).latest()
    assert latest is not None and latest.name == "step-00000002"
    saved_weights = load_file(str(latest / "model.safetensors"))
    await first.consumer.raw.stop()  # "kill": no commit, no checkpoint of step 3
    assert first.policy_version == 3

    model2, tokenizer2, _ = load_model_and_tokenizer(str(tiny_model_dir))
    second = Learner(settings, HFPolicy(model2, OptimConfig(lr=1e-3)), tokenizer2, GRPOConfig(), cfg,
                     checkpoints=CheckpointManager(ckpt_dir), checkpoint_every=2)
    state = await second.start()
    try:
        assert state is not None and second.policy_version == 2 and second.step == 2
        for name, tensor in saved_weights.items():
            assert torch.equal(model2.state_dict()[name], tensor)
        assert second.policy.optimizer.state_dict()["state"], "optimizer state restored"
        assert second.policy.scheduler.last_epoch == 2
        # the group trained after the checkpoint is replayed, and nothing before it
        assert await second.step_once(timeout=30) is not None
        assert {t.group_id for t in second.last_batch.trajectories} == trained_first[2]
        assert second.policy_version == 3
        assert await second.step_once(timeout=3) is None
    finally:
        await second.stop()


def checkpointing_learner(settings: Settings, tiny_model_dir, cfg: BatcherConfig, ckpt_dir) -> Learner:  # type: ignore[no-untyped-def]
    """A learner on the tiny model that checkpoints every step into ``ckpt_dir`` (a fresh policy each call)."""
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer(str(tiny_model_dir))
    return Learner(settings, HFPolicy(model, OptimConfig(lr=1e-3)), tokenizer, GRPOConfig(), cfg,
                   checkpoints=CheckpointManager(ckpt_dir), checkpoint_every=1)


@pytest.mark.parametrize("committed", [True, False], ids=["position-committed", "nothing-committable"])
async def test_resume_does_not_retrain_records_done_past_the_checkpoint_position(settings: Settings, tiny_model_dir,
                                                                                 committed: bool) -> None:  # fmt: skip
    """Groups interleave on agl.triplets, so a group can complete and train while an earlier record's
    group is still assembling: the checkpoint's position (first record not done) then lies before
    records it already trained, or at the partition's start when nothing was committable yet. The
    resumed learner replays from the position and must not train those records a second time."""
    from agl_stream_topics.admin import ensure_topics

    settings = settings.model_copy(update={"partitions": 1})  # one partition: offsets follow the produce order
    assert (await ensure_topics(settings, strict=True)).ok
    a, b, c = (make_group(g, [1.0, 0.0], seed=50 + i) for i, g in enumerate("abc"))
    head = c if committed else []  # a group that trains first and moves the committed position
    await produce_trajectories(settings, [*head, b[0], a[0], a[1]])  # b stays incomplete for now
    topic, position = f"{settings.topic('triplets')}:0", len(head)
    cfg = BatcherConfig(group_size=2, batch_groups=1, max_staleness=None, group_timeout_s=600)
    ckpt_dir = settings.data_dir / "ckpt"

    def learner() -> Learner:
        return checkpointing_learner(settings, tiny_model_dir, cfg, ckpt_dir)

    first = learner()
    await first.start()
    trained_first = []
    for _ in range(2 if committed else 1):
        assert await first.step_once(timeout=30) is not None
        trained_first.append({t.group_id for t in first.last_batch.trajectories})
    assert trained_first[-1] == {"a"}
    state = CheckpointManager(ckpt_dir).load(first.policy)
    assert state is not None and state.offsets == {topic: position}, "b's first record is not done"
    assert state.done_offsets == {topic: [position + 1, position + 2]}, "a's records are trained, past the position"
    await first.consumer.raw.stop()  # "kill"

    await produce_trajectories(settings, [b[1]])
    second = learner()
    assert await second.start() is not None
    try:
        assert await second.step_once(timeout=30) is not None
        assert {t.rollout_id for t in second.last_batch.trajectories} == {t.rollout_id for t in b}
        assert await second.step_once(timeout=2, force=True) is None
        assert second.batcher.assembler.pending_groups == 0 and second.batcher.stats.already_done == 2
        await second.checkpoint()
    finally:
        await second.stop()
    final = CheckpointManager(ckpt_dir).load(second.policy)
    assert final is not None and final.step == len(trained_first) + 1
    assert final.offsets == {topic: position + 4} and final.done_offsets == {}


async def test_a_group_commit_refused_after_a_rebalance_does_not_stop_the_learner(settings: Settings, tiny_model_dir,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A learner paused past its session finds its group rebalanced: the commit before a checkpoint is refused
    (CommitFailedError; the nemesis saw it after pausing the learner). It used to exit; now the checkpoint is
    written with its own positions, training goes on, and the next commit moves the group's offset."""
    from aiokafka import TopicPartition
    from aiokafka.errors import CommitFailedError

    from agl_stream_topics.admin import ensure_topics

    settings = settings.model_copy(update={"partitions": 1})
    assert (await ensure_topics(settings, strict=True)).ok
    a, b = (make_group(g, [1.0, 0.0], seed=60 + i) for i, g in enumerate("ab"))
    await produce_trajectories(settings, [*a, *b])
    cfg = BatcherConfig(group_size=2, batch_groups=1, max_staleness=None, group_timeout_s=600)
    ckpt_dir = settings.data_dir / "ckpt"
    learner = checkpointing_learner(settings, tiny_model_dir, cfg, ckpt_dir)
    await learner.start()
    try:
        commit = learner.consumer.raw.commit

        async def refused(*args: object, **kwargs: object) -> None:
            raise CommitFailedError("the group has already rebalanced")

        monkeypatch.setattr(learner.consumer.raw, "commit", refused)
        metrics = await learner.step_once(timeout=30)
        assert metrics is not None and metrics.extra["deferred_commits_total"] == 1.0
        state = CheckpointManager(ckpt_dir).load(learner.policy)
        topic = settings.topic("triplets")
        assert state is not None and state.step == 1 and state.offsets == {f"{topic}:0": 2}
        monkeypatch.setattr(learner.consumer.raw, "commit", commit)
        assert await learner.step_once(timeout=30) is not None
        assert await learner.consumer.raw.committed(TopicPartition(topic, 0)) == 4
        assert CheckpointManager(ckpt_dir).load(learner.policy).offsets == {f"{topic}:0": 4}  # type: ignore[union-attr]
    finally:
        await learner.stop()


async def test_undecodable_triplet_records_go_to_the_dlq(topics: Settings, tiny) -> None:
    from agl_stream.types import DeadLetter

    settings = topics
    model, tokenizer = tiny
    group = make_group("ok", [1.0, 0.0], seed=40)
    async with RecordProducer(settings) as producer:
        await producer.send_and_wait(settings.topic("triplets"), b'{"not": "an envelope"}', key=group[0].rollout_id)
        await producer.send_many(settings.topic("triplets"), [(t.rollout_id, t) for t in group])
        learner = Learner(settings, HFPolicy(model, OptimConfig(lr=1e-4)), tokenizer, GRPOConfig(),
                          BatcherConfig(group_size=2, batch_groups=1, max_staleness=None), dlq_producer=producer)
        await learner.start(resume=False)
        try:
            assert await learner.step_once(timeout=30) is not None  # the bad record did not stop training
        finally:
            await learner.stop()
    assert learner.batcher.stats.rejected_records == 1
    dlq = RecordConsumer(settings, [settings.topic("dlq")], group_id=None)
    await dlq.start()
    try:
        letters = []
        for _ in range(20):
            letters += [d.value for d in (await dlq.get_decoded(DeadLetter, timeout=0.5))[0]]
            if letters:
                break
    finally:
        await dlq.stop(commit=False)
    assert len(letters) == 1 and letters[0].payload == b'{"not": "an envelope"}'
    assert "envelope" in letters[0].reason and letters[0].processor == "agl_stream_trainer.batching"


async def test_a_trajectory_published_again_after_a_checkpoint_is_not_trained_again(settings: Settings,
                                                                                     tiny_model_dir) -> None:  # fmt: skip
    """A triplet processor that restarts publishes some trajectories again, maybe long after their group
    trained and checkpointed: the resumed learner knows them from the checkpoint (``settled_rollouts``)."""
    from agl_stream_topics.admin import ensure_topics

    settings = settings.model_copy(update={"partitions": 1})
    assert (await ensure_topics(settings, strict=True)).ok
    a, b = make_group("a", [1.0, 0.0], seed=60), make_group("b", [0.0, 1.0], seed=61)
    await produce_trajectories(settings, a)
    cfg = BatcherConfig(group_size=2, batch_groups=1, max_staleness=None, group_timeout_s=600)
    ckpt_dir = settings.data_dir / "ckpt"

    def learner() -> Learner:
        return checkpointing_learner(settings, tiny_model_dir, cfg, ckpt_dir)

    first = learner()
    await first.start()
    assert await first.step_once(timeout=30) is not None
    await first.stop()
    state = CheckpointManager(ckpt_dir).load(first.policy)
    assert state is not None and sorted(state.settled_rollouts) == sorted(t.rollout_id for t in a)

    await produce_trajectories(settings, [*a, *b])  # a published again, then a new group
    second = learner()
    await second.start()
    try:
        assert await second.step_once(timeout=30) is not None
        assert {t.group_id for t in second.last_batch.trajectories} == {"b"}
        assert await second.step_once(timeout=2, force=True) is None  # a does not train a second time
        assert second.batcher.stats.duplicates == 2 and second.batcher.assembler.pending_groups == 0
    finally:
        await second.stop()


def _multi_turn_group(group_id: str, rewards: list[float], calls: int = 3) -> list:
    """Rollouts whose every call's prompt is the previous prompt + response + a tool result: they merge."""
    from agl_stream.types import Trajectory, Triplet

    out = []
    for i, reward in enumerate(rewards):
        prompt, triplets = [100 + i, 101, 102, 103], []
        for turn in range(calls):
            response = [200 + turn, 201 + i, 202]
            triplets.append(Triplet(prompt={"token_ids": list(prompt)},
                                    response={"token_ids": response, "logprobs": [-1.0] * 3}, policy_version=0))
            prompt = prompt + response + [300 + turn, 301]  # the tool's answer joins the conversation
        out.append(Trajectory(rollout_id=f"ro-{group_id}-{i}", attempt_id=f"at-{group_id}-{i}", group_id=group_id,
                              mode="train", final_reward=reward, triplets=triplets))  # fmt: skip
    return out


async def test_trajectory_aggregation_trains_one_row_per_rollout_and_reports_the_merge_rate(topics: Settings, tiny) -> None:
    model, tokenizer = tiny
    await produce_trajectories(topics, _multi_turn_group("m1", [1.0, 0.0, 0.0, 1.0]) + _multi_turn_group("m2", [0.0, 1.0, 1.0, 0.0]))
    learner = Learner(topics, HFPolicy(model, OptimConfig(lr=1e-3)), tokenizer, GRPOConfig(aggregation="trajectory"),
                      BatcherConfig(group_size=4, batch_groups=2, max_staleness=1))  # fmt: skip
    await learner.start()
    try:
        metrics = await learner.step_once(timeout=60)
    finally:
        await learner.stop()
    assert metrics is not None and metrics.num_triplets == 24 and metrics.num_sequences == 8  # 24 calls, 8 rows
    assert metrics.extra["calls"] == 24 and metrics.extra["merged_calls"] == 16
    assert metrics.extra["merge_rate"] == pytest.approx(16 / 24) and metrics.extra["prefix_breaks"] == 0
    # each row: a 4-token prompt, then 3 calls of 3 tokens with 2 context tokens between: 4 + 9 + 4 = 17
    assert metrics.extra["learner_tokens"] == 8 * 17 and metrics.extra["trajectories"] == 8
