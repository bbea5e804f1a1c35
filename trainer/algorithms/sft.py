"""``SFT``: supervised fine-tuning on the best-rewarded trajectories (rejection-sampling fine-tuning).

Each round:

1. run the training set through the pipeline (``samples_per_task`` rollouts per task, mode
   ``train``) with the current policy, served by the embedded engine and announced on
   ``agl.resources`` by the :class:`~agl_stream_trainer.publisher.WeightPublisher`;
2. read the attempts' trajectories (token ids per LLM call) from ``agl.triplets``;
3. keep the trajectories whose final reward is ``>= threshold``, and/or the ``top_k`` best of
   each task (ties keep the earlier rollout);
4. fine-tune with cross-entropy on their response tokens only (the prompt is masked out: the
   trainer's ``collate`` puts a ``response_mask`` on exactly those tokens);
5. publish the new weights as the next policy version (engine first, then the announcement).

The backend (:class:`~agl_stream_trainer.backends.hf.HFPolicy`), the rows/collate code and the engine are the
RL trainer's; only the loss differs (plain masked NLL, no advantages). Rewards come from
``agl.attempts`` (:class:`RolloutResults`), the token ids from ``agl.triplets``.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.algorithm import Algorithm, RolloutResults
from agl_stream.client import TopicFollower
from agl_stream.types import LLM, ProxyLLM, Trajectory

from agl_stream_trainer.algorithms.batch import Row, TrainBatch, collate, rows_from_trajectories
from agl_stream_trainer.backends.hf import BackendConfig, HFPolicy, OptimConfig

logger = logging.getLogger(__name__)


class SFTConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(default="tiny", description="tiny | smollm2 | a save_pretrained directory")
    model_name: Optional[str] = Field(default=None, description="the name the engine serves (default: from model)")
    rounds: int = Field(default=1, ge=1)
    samples_per_task: int = Field(default=2, ge=1)
    threshold: Optional[float] = Field(default=None, description="keep trajectories with final reward >= threshold")
    top_k: Optional[int] = Field(default=1, ge=1, description="keep the k best trajectories of each task")
    epochs: int = Field(default=2, ge=1, description="passes over the selected rows per round")
    batch_rows: int = Field(default=16, ge=1, description="rows per optimizer step")
    max_prompt_length: Optional[int] = 1024
    max_response_length: Optional[int] = 256
    sampling_parameters: dict[str, Any] = Field(default_factory=lambda: {"temperature": 1.0})
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    backend: BackendConfig = Field(default_factory=BackendConfig)
    max_batch_rows: int = Field(default=16, ge=1, description="engine: concurrent generations per batch")
    resources_id: str = "policy"
    resource_name: str = "main_llm"
    rollout_timeout: float = 1200.0
    trajectory_timeout: float = 60.0


def response_nll(policy: HFPolicy, batch: TrainBatch) -> float:
    """Mean negative log-likelihood per response token of ``batch`` under the policy (no grad)."""
    logprobs = policy.logprobs(batch)
    mask = batch.response_mask
    return float(-(logprobs * mask).sum() / mask.sum().clamp(min=1))


def sft_step(policy: HFPolicy, batch: TrainBatch) -> tuple[float, float]:
    """One optimizer step of token-mean cross-entropy on the response tokens; (loss, grad norm)."""
    policy.model.train()
    total_tokens = batch.response_mask.sum().clamp(min=1)
    loss_sum = 0.0
    for mb in policy.micro_batches(batch):
        out = policy.forward(mb)
        mask = mb.response_mask.to(out.logprobs.device)
        loss = -(out.logprobs * mask).sum() / total_tokens.to(out.logprobs.device)
        loss.backward()
        loss_sum += float(loss.detach())
    grad_norm = policy.optimizer_step()
    return loss_sum, grad_norm


def select(trajectories: Sequence[tuple[int, Trajectory]], threshold: Optional[float], top_k: Optional[int]) -> list[Trajectory]:
    """``(task index, trajectory)`` pairs -> the trajectories to imitate (see the module docstring)."""
    def reward(t: Trajectory) -> float:
        return float(t.final_reward) if t.final_reward is not None else float("-inf")

    kept = [(i, t) for i, t in trajectories if threshold is None or reward(t) >= threshold]
    if top_k is not None:
        by_task: dict[int, list[Trajectory]] = {}
        for i, t in kept:
            by_task.setdefault(i, []).append(t)
        kept = [(i, t) for i, ts in by_task.items() for t in sorted(ts, key=lambda t: -reward(t))[:top_k]]
    return [t for _, t in kept]


class SFT(Algorithm):
    """Rejection-sampling fine-tuning through the live pipeline (see the module docstring)."""

    def __init__(self, config: SFTConfig | dict[str, Any] | None = None) -> None:
        self.config = config if isinstance(config, SFTConfig) else SFTConfig.model_validate(dict(config or {}))
        if self.config.threshold is None and self.config.top_k is None:
            raise ValueError("set threshold, top_k or both: SFT must select trajectories")
        self.policy: Optional[HFPolicy] = None
        self.tokenizer: Any = None
        self.policy_version = 0
        self.last_selected: list[Row] = []
        self.report: dict[str, Any] = {}

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        from agl_stream.kafka import RecordProducer

        from agl_stream_trainer.engines.embedded import EmbeddedEngine, EmbeddedServer
        from agl_stream_trainer.engines.generation import Generator
        from agl_stream_trainer.models import load_model_and_tokenizer
        from agl_stream_trainer.publisher import WeightPublisher

        if not train_dataset:
            raise ValueError("SFT needs a training dataset")
        cfg = self.config
        items = list(train_dataset)
        model, self.tokenizer, model_dir = await asyncio.to_thread(load_model_and_tokenizer, cfg.model)
        served, _, _ = await asyncio.to_thread(load_model_and_tokenizer, cfg.model)
        model_name = cfg.model_name or (cfg.model if cfg.model in ("tiny", "smollm2") else model_dir.name)
        self.policy = HFPolicy(model, cfg.optim, cfg.backend)
        generator = Generator(served, self.tokenizer, max_batch_rows=cfg.max_batch_rows)
        server = EmbeddedServer(generator, model_name).start()
        engine = EmbeddedEngine(server.base_url, model_name, generator=generator)
        logger.info("SFT: serving %s at %s/v1", model_name, server.base_url)

        # other initial resources (prompt templates, ...) travel with every announcement
        extra = {k: v for k, v in (self.initial_resources or {}).items() if not isinstance(v, (LLM, ProxyLLM))}
        trajectories: dict[tuple[str, str], Trajectory] = {}

        def keep(_key: Optional[str], t: Trajectory) -> None:
            if t.trainable:  # the attempt that ended its rollout; superseded attempts never train
                trajectories[(t.rollout_id, t.attempt_id)] = t

        follower: TopicFollower[Trajectory] = TopicFollower(self.settings, "triplets", Trajectory, keep)
        producer = await RecordProducer(self.settings).start()
        results = await RolloutResults(self.settings).start()
        await follower.start()
        rounds: list[dict[str, Any]] = []
        try:
            publisher = WeightPublisher(engine, producer, self.settings, resources_id=cfg.resources_id,
                                        resource_name=cfg.resource_name, sampling_parameters=cfg.sampling_parameters,
                                        extra_resources=extra)  # fmt: skip
            await publisher.announce(self.policy_version)
            for round_no in range(1, cfg.rounds + 1):
                rounds.append(await self._round(round_no, items, results, follower, trajectories, publisher))
        finally:
            await follower.stop()
            await results.stop()
            await producer.stop()
            server.stop()
            generator.close()
        self.report = {"rounds": rounds, "policy_version": self.policy_version}
        return self.report

    async def _round(self, round_no: int, items: list[Any], results: RolloutResults, follower: TopicFollower[Trajectory],
                     trajectories: dict[tuple[str, str], Trajectory], publisher: Any) -> dict[str, Any]:  # fmt: skip
        cfg = self.config
        assert self.policy is not None
        version = self.policy_version
        # 1. roll out the training set with the current policy
        owners: dict[str, int] = {}
        for index, item in enumerate(items):
            for _ in range(cfg.samples_per_task):
                rollout = await self.client.enqueue_rollout(item, mode="train", resources_id=cfg.resources_id,
                                                            metadata={"sft_round": round_no, "sft_task": index})  # fmt: skip
                owners[rollout.rollout_id] = index
        outcomes = await results.wait(list(owners), timeout=cfg.rollout_timeout)
        succeeded = {rid: o for rid, o in outcomes.items() if o.status == "succeeded"}
        logger.info("SFT round %d: %d/%d rollouts succeeded (policy version %d)", round_no, len(succeeded), len(owners), version)
        # 2. their trajectories (the processors write them shortly after the attempt finished)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.trajectory_timeout
        while True:
            have = [(owners[rid], t) for rid, o in succeeded.items() if (t := trajectories.get((rid, o.attempt_id))) is not None]
            if len(have) == len(succeeded) or loop.time() >= deadline:
                break
            await follower.wait_changed(1.0)
        for rid in owners:  # this round's trajectories are not needed again
            for key in [k for k in trajectories if k[0] == rid]:
                trajectories.pop(key, None)
        if len(have) < len(succeeded):
            logger.warning("SFT round %d: %d trajectories missing after %.0fs", round_no, len(succeeded) - len(have), cfg.trajectory_timeout)
        rewards = [float(t.final_reward or 0.0) for _, t in have]
        # 3. select, 4. fine-tune, 5. publish
        chosen = select(have, cfg.threshold, cfg.top_k)
        rows = rows_from_trajectories(chosen, max_prompt_length=cfg.max_prompt_length, max_response_length=cfg.max_response_length)
        summary: dict[str, Any] = {
            "round": round_no,
            "policy_version_used": version,
            "rollouts": len(owners),
            "succeeded": len(succeeded),
            "trajectories": len(have),
            "mean_reward": statistics.fmean(rewards) if rewards else None,
            "selected": len(chosen),
            "selected_mean_reward": statistics.fmean(float(t.final_reward or 0.0) for t in chosen) if chosen else None,
            "rows": len(rows),
            "policy_versions_seen": sorted({v for _, t in have for v in [t.policy_version] if v is not None}),
        }
        if not rows:
            logger.warning("SFT round %d: nothing selected; the policy stays at version %d", round_no, version)
            return summary
        self.last_selected = rows
        full = collate(rows, self.tokenizer.pad_token_id)
        nll_before = await asyncio.to_thread(response_nll, self.policy, full)
        losses = []
        for _epoch in range(cfg.epochs):
            for start in range(0, len(rows), cfg.batch_rows):
                batch = collate(rows[start : start + cfg.batch_rows], self.tokenizer.pad_token_id)
                loss, _norm = await asyncio.to_thread(sft_step, self.policy, batch)
                losses.append(loss)
        nll_after = await asyncio.to_thread(response_nll, self.policy, full)
        self.policy_version += 1
        weights = await asyncio.to_thread(lambda: {k: v.clone() for k, v in self.policy.state_dict().items()})  # type: ignore[union-attr]
        await publisher.publish(self.policy_version, weights)
        summary.update(nll_before=nll_before, nll_after=nll_after, steps=len(losses), loss_last=losses[-1],
                       policy_version=self.policy_version)  # fmt: skip
        logger.info("SFT round %d: mean reward %.3f; trained on %d rows of %d selected trajectories, NLL %.4f -> %.4f; "
                    "published version %d", round_no, summary["mean_reward"] or 0.0, len(rows), len(chosen),
                    nll_before, nll_after, self.policy_version)  # fmt: skip
        return summary


__all__ = ["SFT", "SFTConfig", "response_nll", "select", "sft_step"]
