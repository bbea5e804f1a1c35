"""Fault injection on the learner: SIGKILL ``agl-stream trainer`` mid-step, restart it on the same checkpoints.

The learner runs as its own OS process (the CLI a deployment runs) against the real broker, with
a tiny random Llama and GRPO groups of synthetic trajectories already waiting on ``agl.triplets``,
so it trains back to back. The trajectories of the groups are interleaved on the topic, as live
traffic is (the groups' rollouts finish in any order). It checkpoints every ``checkpoint_every``
steps; the test SIGKILLs it as soon as it reports a given step past a checkpoint (it is then in
the middle of the next one, with a backlog to train), restarts it with the same checkpoint folder
and lets it run to ``max_steps``, where it stops on its own with a final checkpoint.

The audit reads both runs' step metrics (JSONL, each step names the rollouts it trained on). The
surviving history is run 1 up to the checkpoint it was resumed from, then run 2: its steps and
policy versions run 1..N without a reset or a gap, and every produced rollout trained in it exactly
once (the steps run 1 trained after its last checkpoint were lost with the kill and trained again
by run 2). The final checkpoint's consumer positions are at the end of ``agl.triplets``, so a
further restart replays nothing. Resumed state: replaying run 2's first steps (its recorded
batches) from the checkpoint on the test side reproduces run 2's next checkpoint - weights and
AdamW moments - which a resume with a fresh optimizer does not.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agl_stream.config import Settings
from agl_stream.service import ServiceProcess, agl_command
from agl_stream.kafka import RecordProducer
from agl_stream.types import Trajectory, Triplet
from tests.faults.audit import audit_learner
from tests.faults.report import report
from agl_stream_trainer.checkpoint import STATE_FILE, CheckpointManager
from agl_stream_trainer.config import TrainerConfig
from agl_stream_trainer.metrics import StepMetrics, read_jsonl_metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
GROUP_SIZE = 4


def reduced_or_full(reduced: tuple[int, ...], full: tuple[int, ...]) -> list[object]:
    return [pytest.param(*reduced, id="reduced"), pytest.param(*full, id="full", marks=pytest.mark.chaos)]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agl_stream_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", seed=0)


def make_trajectories(groups: int, seed: int = 0) -> list[Trajectory]:
    """``groups`` GRPO groups of single-turn trajectories; 32 prompt + 64 response tokens each, so a
    step takes a noticeable fraction of a second on a CPU and the kill lands inside one."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        for i in range(GROUP_SIZE):
            reward = float((g + i) % 2)
            response = [rng.randrange(100, 5000) for _ in range(64)]
            out.append(Trajectory(
                rollout_id=f"ro-{g:03d}-{i}", attempt_id=f"at-{g:03d}-{i}", group_id=f"grp-{g:03d}", mode="train",
                final_reward=reward, metadata={"group_size": GROUP_SIZE},
                triplets=[Triplet(prompt={"token_ids": [rng.randrange(100, 5000) for _ in range(32)]},
                                  response={"token_ids": response, "logprobs": [-rng.uniform(8, 12) for _ in response]},
                                  reward=reward, policy_version=0)],
            ))  # fmt: skip
    return out


async def produce_interleaved(settings: Settings, trajectories: list[Trajectory]) -> dict[str, int]:
    """First members of every group, then second members...; returns the end offset of each partition."""
    by_member = [t for i in range(GROUP_SIZE) for t in trajectories[i::GROUP_SIZE]]
    async with RecordProducer(settings) as producer:
        acks = await producer.send_many(settings.topic("triplets"), [(t.rollout_id, t) for t in by_member])
    ends: dict[str, int] = {}
    for ack in acks:
        key = f"{ack.topic}:{ack.partition}"
        ends[key] = max(ends.get(key, 0), ack.offset + 1)
    return ends


def trainer_config(tiny_model: Path, workdir: Path, run: int, *, steps: int, checkpoint_every: int) -> Path:
    path = workdir / f"trainer-run{run}.yaml"
    path.write_text(yaml.safe_dump({
        "run_id": "chaos-learner",
        "model": str(tiny_model),
        "engine": {"kind": "none"},
        "optim": {"lr": 1e-3},
        # one complete group per step; synthetic triplets are all version 0, so no staleness bound
        "batcher": {"group_size": GROUP_SIZE, "batch_groups": 1, "min_group_size": 2, "max_staleness": None,
                    "group_timeout_s": 600},
        "checkpoint_every": checkpoint_every,
        "checkpoint_dir": str(workdir / "checkpoints"),
        "keep_checkpoints": 1000,  # the audit reloads the checkpoint run 2 resumed from
        "max_steps": steps,
        "metrics": {"clickhouse": False, "progress": False, "jsonl": str(workdir / f"steps-run{run}.jsonl")},
    }))  # fmt: skip
    return path


def start_trainer(settings: Settings, config: Path, workdir: Path, run: int) -> ServiceProcess:
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "AGL_KAFKA_BOOTSTRAP": str(settings.kafka_bootstrap),
        "AGL_TOPIC_PREFIX": settings.topic_prefix,
        "AGL_PARTITIONS": str(settings.partitions),
        "AGL_KAFKA_SESSION_TIMEOUT_MS": str(settings.kafka_session_timeout_ms),
        "AGL_DATA_DIR": str(workdir / "agl"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = ServiceProcess(f"trainer-run{run}", agl_command("trainer", "--config", str(config)), env=env,
                          log_path=workdir / "logs" / f"trainer-run{run}.log", cwd=ROOT)  # fmt: skip
    return proc.start()


def read_steps(path: Path) -> list[StepMetrics]:
    return read_jsonl_metrics(path) if path.exists() else []


async def wait_for_step(proc: ServiceProcess, metrics: Path, step: int, timeout: float) -> None:
    """Until the fresh JSONL file has ``step`` complete lines (one per step; a line being written is not counted)."""
    deadline = time.monotonic() + timeout
    while (metrics.read_text().count("\n") if metrics.exists() else 0) < step:
        proc.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the learner did not reach step {step} within {timeout:.0f}s:\n{proc.tail(40)}")
        await asyncio.sleep(0.02)


def checkpoint_state(path: Path) -> dict[str, Any]:
    return json.loads((path / STATE_FILE).read_text())


def policy_at(config: TrainerConfig, model_dir: Path, checkpoint: Path, *,
              fresh_optimizer: bool = False) -> tuple[Any, int]:  # fmt: skip
    """A policy with ``checkpoint``'s weights and (unless ``fresh_optimizer``) its optimizer and LR
    schedule, and the tokenizer's pad token id."""
    from agl_stream_trainer.backends.hf import HFPolicy
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer(str(model_dir))
    policy = HFPolicy(model, config.optim, config.backend)
    if fresh_optimizer:  # the weights only: what a resume that lost the optimizer state would train on
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(checkpoint / "model.safetensors")), strict=False)
    else:
        assert CheckpointManager(checkpoint.parent).load(policy, checkpoint) is not None
    return policy, tokenizer.pad_token_id


def train(policy_and_pad: tuple[Any, int], config: TrainerConfig, batches: list[list[Trajectory]]) -> Any:
    """The policy after one learner step per batch, in order (what the learner does with them)."""
    from agl_stream_trainer.algorithms.batch import collate, rows_from_trajectories
    from agl_stream_trainer.algorithms.grpo import train_step

    policy, pad_token_id = policy_and_pad
    algo = config.algorithm
    for trajectories in batches:
        rows = rows_from_trajectories(trajectories, reward_assignment=algo.reward_assignment,
                                      max_prompt_length=algo.max_prompt_length,
                                      max_response_length=algo.max_response_length,
                                      aggregation=algo.aggregation)  # fmt: skip
        train_step(policy, collate(rows, pad_token_id), algo)
    return policy


def differences(policy: Any, saved: Any) -> list[str]:
    """Weights and AdamW state tensors of ``policy`` that differ from ``saved``'s."""
    ours, theirs = policy.model.state_dict(), saved.model.state_dict()
    differ = [name for name in theirs if not torch.allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-6)]
    ours_opt, theirs_opt = policy.optimizer.state_dict()["state"], saved.optimizer.state_dict()["state"]
    for idx, values in theirs_opt.items():
        for key, value in values.items():
            mine = ours_opt.get(idx, {}).get(key)
            if mine is None or not torch.allclose(torch.as_tensor(mine), torch.as_tensor(value), rtol=1e-4, atol=1e-9):
                differ.append(f"optimizer state {idx}.{key}")
    return differ


# (groups = steps, checkpoint_every, SIGKILL once this step is reported): the learner must train two more steps
# and checkpoint before the kill lands for the kill to miss the window, ~1.5 s at the step size here.
@pytest.mark.parametrize(("groups", "checkpoint_every", "kill_after"), reduced_or_full((7, 3, 4), (24, 4, 10)))
async def test_sigkill_learner_mid_step_resumes_from_checkpoint(
    topics: Settings, tiny_model: Path, workdir: Path, groups: int, checkpoint_every: int, kill_after: int
) -> None:
    settings = topics
    started = time.monotonic()
    trajectories = make_trajectories(groups, seed=groups)
    by_id = {t.rollout_id: t for t in trajectories}
    ends = await produce_interleaved(settings, trajectories)
    steps = groups  # one group per step
    ckpt_dir = workdir / "checkpoints"
    metrics1, metrics2 = workdir / "steps-run1.jsonl", workdir / "steps-run2.jsonl"

    # ---- run 1: train past a checkpoint, SIGKILL in the middle of the following step
    config1 = trainer_config(tiny_model, workdir, 1, steps=steps, checkpoint_every=checkpoint_every)
    run1 = start_trainer(settings, config1, workdir, 1)
    try:
        await wait_for_step(run1, metrics1, kill_after, timeout=180)
    finally:
        run1.kill()  # SIGKILL to its process group, while it trains step kill_after + 1
    latest = CheckpointManager(ckpt_dir).latest()
    assert latest is not None, "no checkpoint before the kill"
    resumed = checkpoint_state(latest)
    resumed_from = int(resumed["step"])
    assert resumed["policy_version"] == resumed_from
    history1 = read_steps(metrics1)
    trained_before_kill = max(m.step for m in history1)
    assert resumed_from < trained_before_kill, (
        f"the kill came after the learner had checkpointed everything it trained (step {resumed_from}): nothing to "
        "replay, the scenario did not happen")  # fmt: skip

    # ---- run 2: same checkpoints, runs to max_steps and stops on its own
    config2 = trainer_config(tiny_model, workdir, 2, steps=steps, checkpoint_every=checkpoint_every)
    run2 = start_trainer(settings, config2, workdir, 2)
    try:
        rc = await asyncio.to_thread(run2.wait, 240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the resumed learner did not reach max_steps={steps} within 240 s:\n{run2.tail(60)}")
    finally:
        run2.stop(timeout=10)
    assert rc == 0, run2.tail(60)
    history2 = read_steps(metrics2)

    # ---- the audit: the surviving history is run 1 up to the checkpoint, then run 2
    assert [m.step for m in history1] == list(range(1, trained_before_kill + 1))
    assert [m.step for m in history2] == list(range(resumed_from + 1, steps + 1)), "run 2 did not resume the checkpoint"
    learner = audit_learner([(0, history1), (resumed_from, history2)])
    assert not learner.problems, learner.problems
    surviving, trained, duplicates = learner.surviving, learner.trained, learner.duplicates
    assert learner.steps == list(range(1, steps + 1))
    assert all(m.policy_version == m.step for m in surviving), [(m.step, m.policy_version) for m in surviving]
    lost = len(set(by_id) - set(trained))
    unknown = set(trained) - set(by_id)
    for m in surviving:  # each step trained one complete group
        assert len(m.rollout_ids) == GROUP_SIZE, m
        assert len({by_id[r].group_id for r in m.rollout_ids if r in by_id}) == 1, m
    discarded = [m for m in history1 if m.step > resumed_from]  # trained by run 1, lost with the kill
    replayed = {rid for m in discarded for rid in m.rollout_ids}
    report(f"[sigkill-learner] triplets={len(trajectories)} trained={sum(trained.values())} "
          f"steps_before_kill={trained_before_kill} resumed_from_step={resumed_from} "
          f"replayed_steps={len(discarded)} steps={len(surviving)} duplicates={duplicates} lost={lost} "
          f"({time.monotonic() - started:.0f} s)")  # fmt: skip
    assert duplicates == 0, sorted(r for r, n in trained.items() if n > 1)
    assert lost == 0 and not unknown, (sorted(set(by_id) - set(trained)), unknown)
    assert replayed <= set(trained)

    # nothing left to replay: the final checkpoint's positions are the end of agl.triplets
    final = CheckpointManager(ckpt_dir).latest()
    assert final is not None and final.name == f"step-{steps:08d}"
    final_state = checkpoint_state(final)
    assert final_state["step"] == steps and final_state["policy_version"] == steps
    assert final_state["offsets"] == ends, (
        f"final checkpoint at {final_state['offsets']}, topic ends at {ends}: a restart would replay records "
        "that were already trained")  # fmt: skip

    # run 2 resumed the checkpoint's weights and optimizer: replaying its first recorded batches from that
    # checkpoint reproduces its next checkpoint, weights and AdamW moments (a fresh optimizer does not)
    next_ckpt = ckpt_dir / f"step-{resumed_from + checkpoint_every:08d}"
    assert next_ckpt.exists(), sorted(p.name for p in ckpt_dir.iterdir())
    batches = [[by_id[r] for r in m.rollout_ids] for m in history2[:checkpoint_every]]
    config = TrainerConfig.from_yaml(config2)
    saved, _ = policy_at(config, tiny_model, next_ckpt)
    assert differences(train(policy_at(config, tiny_model, latest), config, batches), saved) == []
    fresh_optimizer = train(policy_at(config, tiny_model, latest, fresh_optimizer=True), config, batches)
    assert differences(fresh_optimizer, saved), (
        "a resume with a fresh optimizer reaches the same state: the check above proves nothing")  # fmt: skip
