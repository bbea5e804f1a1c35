"""Fixtures for the learner tests: the tiny random Llama (SmolLM2 tokenizer) and triplet builders."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Optional

import pytest

from agl_stream.types import Trajectory, Triplet


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agl_stream_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", seed=0)


@pytest.fixture
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    """A fresh (model, tokenizer) pair, identical weights every time."""
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer(str(tiny_model_dir))
    return model, tokenizer


def make_group(
    group_id: str,
    rewards: list[float],
    *,
    version: int = 0,
    seed: int = 0,
    turns: int = 1,
    with_logprobs: bool = True,
    versions: Optional[list[int]] = None,
) -> list[Trajectory]:
    """One GRPO group: a trajectory per reward, each with ``turns`` triplets of random token ids."""
    rng = random.Random(seed)
    out = []
    for i, reward in enumerate(rewards):
        triplets = []
        for _ in range(turns):
            prompt = [rng.randrange(100, 5000) for _ in range(rng.randint(4, 10))]
            response = [rng.randrange(100, 5000) for _ in range(rng.randint(3, 8))]
            logprobs = [-rng.uniform(8.0, 12.0) for _ in response] if with_logprobs else None
            triplets.append(
                Triplet(
                    prompt={"token_ids": prompt},
                    response={"token_ids": response, **({"logprobs": logprobs} if logprobs else {})},
                    policy_version=versions[i] if versions is not None else version,
                )
            )
        out.append(
            Trajectory(
                rollout_id=f"ro-{group_id}-{i}",
                attempt_id=f"at-{group_id}-{i}",
                group_id=group_id,
                mode="train",
                final_reward=reward,
                triplets=triplets,
                metadata={"group_size": len(rewards)},
            )
        )
    return out


async def produce_trajectories(settings: Any, trajectories: list[Trajectory]) -> None:
    from agl_stream.kafka import RecordProducer

    async with RecordProducer(settings) as producer:
        await producer.send_many(settings.topic("triplets"), [(t.rollout_id, t) for t in trajectories])
