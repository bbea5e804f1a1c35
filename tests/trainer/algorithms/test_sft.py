"""SFT on the best-rewarded trajectories, through the real pipeline with the tiny random model.

Broker, processors (spans -> triplets), a runner process and the embedded engine serving the
policy: two rounds, each rolling out every task three times, keeping the best sample per task,
fine-tuning on it and publishing the next policy version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import pytest
import torch

from agl_stream.client.resources import ResourceCache
from agl_stream.config import Settings
from agl_stream.trainer import Trainer
from agl_stream.types import Trajectory, Triplet
from agl_stream_trainer.algorithms.batch import collate
from agl_stream_trainer.algorithms.sft import SFT, response_nll, select
from agl_stream_trainer.backends.hf import HFPolicy, OptimConfig
from tests.trainer.algorithms.sft_agent import letter_share


def _trajectory(rollout_id: str, reward: Optional[float]) -> Trajectory:
    return Trajectory(rollout_id=rollout_id, attempt_id=f"at-{rollout_id}", final_reward=reward,
                      triplets=[Triplet(prompt={"token_ids": [1, 2]}, response={"token_ids": [3]})])  # fmt: skip


def test_select_threshold_and_top_k() -> None:
    pairs = [(0, _trajectory("a", 0.2)), (0, _trajectory("b", 0.9)), (0, _trajectory("c", 0.5)),
             (1, _trajectory("d", 0.1)), (1, _trajectory("e", None))]  # fmt: skip
    ids = lambda ts: [t.rollout_id for t in ts]  # noqa: E731
    assert ids(select(pairs, None, 1)) == ["b", "d"]
    assert ids(select(pairs, None, 2)) == ["b", "c", "d", "e"]
    assert ids(select(pairs, 0.5, None)) == ["b", "c"]
    assert ids(select(pairs, 0.3, 1)) == ["b"]
    assert letter_share("ab1 ") == 0.5 and letter_share("") == 0.0


class CheckedSFT(SFT):
    """SFT, then read the latest resources back from agl.resources with a fresh follower."""

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        report = await super().run(train_dataset, val_dataset)
        cache = await ResourceCache(self.settings).start()
        try:
            latest = cache.latest()
            assert latest is not None
            report["latest_from_topic"] = latest.model_dump(mode="json")
        finally:
            await cache.stop()
        return report


@pytest.mark.integration
@pytest.mark.slow
def test_sft_rounds_train_on_selected_trajectories_and_publish(tmp_path: Path, tiny_model_dir: Path) -> None:
    from agl_stream_trainer.models import load_model_and_tokenizer

    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    sft = CheckedSFT({
        "model": str(tiny_model_dir), "model_name": "tiny", "rounds": 2, "samples_per_task": 3, "top_k": 1,
        "epochs": 3, "optim": {"lr": 1e-3}, "rollout_timeout": 180, "trajectory_timeout": 30,
    })  # fmt: skip
    items = [{"prompt": f"Say something about the number {i}."} for i in range(4)]
    report = Trainer(sft, n_runners=1, runner_concurrency=8, settings=settings).fit(
        "tests.trainer.algorithms.sft_agent:letters_agent", items
    )

    first, second = report["rounds"]
    for summary, version in ((first, 0), (second, 1)):
        assert summary["rollouts"] == 12 and summary["succeeded"] == 12 and summary["trajectories"] == 12
        assert summary["selected"] == 4 and summary["rows"] == 4  # the best of three per task, one LLM call each
        assert summary["selected_mean_reward"] >= summary["mean_reward"]
        assert summary["policy_versions_seen"] == [version]  # runners generated with the published weights
        assert summary["policy_version"] == version + 1
        assert summary["nll_after"] < summary["nll_before"]
    assert report["policy_version"] == 2
    latest = report["latest_from_topic"]
    assert latest["resources_id"] == "policy" and latest["version"] == 2
    assert latest["resources"]["main_llm"]["policy_version"] == 2

    # the weights changed, and the NLL of the last selected responses is lower than under the initial model
    initial, tokenizer, _ = load_model_and_tokenizer(str(tiny_model_dir))
    trained = sft.policy.model.state_dict()  # type: ignore[union-attr]
    changed = [name for name, tensor in initial.state_dict().items() if not torch.equal(tensor, trained[name].cpu())]
    assert len(changed) > 0
    batch = collate(sft.last_selected, tokenizer.pad_token_id)
    before = response_nll(HFPolicy(initial, OptimConfig()), batch)
    after = response_nll(sft.policy, batch)  # type: ignore[arg-type]
    assert after == pytest.approx(second["nll_after"], rel=1e-4)
    assert after < before
