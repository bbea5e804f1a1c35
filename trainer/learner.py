"""The learner loop: batches from ``agl.triplets`` -> one algorithm step -> new policy version -> publish.

Policy versions count learner steps: version ``v`` is the weights after ``v`` steps (0 = initial).
After a step the batch's records are marked done; they are committed to the ``agl-learner``
group when a checkpoint is written (commit first, then the checkpoint records those positions,
and the offsets of records already done past them), so after a crash the learner resumes at the
checkpoint's version and replays exactly the records trained after it. Without checkpoints the
group is committed after every step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from agl_stream.config import Settings

from agl_stream_trainer.algorithms.aggregation import MergeStats
from agl_stream_trainer.algorithms.batch import build_rows, collate
from agl_stream_trainer.algorithms.grpo import GRPOConfig, StepStats, train_step
from agl_stream_trainer.backends.hf import HFPolicy
from agl_stream_trainer.batching import LEARNER_GROUP, Batch, BatcherConfig, TripletBatcher, wait_for_assignment
from agl_stream_trainer.checkpoint import CheckpointManager, TrainerState, offsets_from_json, offsets_to_json
from agl_stream_trainer.metrics import MetricsHub, StepMetrics
from agl_stream_trainer.publisher import WeightPublisher

logger = logging.getLogger(__name__)


class StalenessViolation(RuntimeError):
    """A row older than the off-policy bound reached the optimizer (a bug: the batcher filters them)."""


class Learner:
    def __init__(
        self,
        settings: Settings,
        policy: HFPolicy,
        tokenizer: Any,
        algorithm: GRPOConfig,
        batcher: BatcherConfig,
        *,
        publisher: Optional[WeightPublisher] = None,
        checkpoints: Optional[CheckpointManager] = None,
        metrics: Optional[MetricsHub] = None,
        publish_every: int = 1,
        checkpoint_every: int = 0,
        ref_model: Any = None,
        group_id: str = LEARNER_GROUP,
        dlq_producer: Any = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.tokenizer = tokenizer
        self.algorithm = algorithm
        self.batcher_config = batcher
        self.publisher = publisher
        self.checkpoints = checkpoints
        self.metrics = metrics or MetricsHub()
        self.publish_every = publish_every
        self.checkpoint_every = checkpoint_every
        self.ref_model = ref_model if ref_model is not None else (policy.frozen_copy() if algorithm.kl_coef > 0 else None)
        self.group_id = group_id
        self.dlq_producer = dlq_producer  # undecodable agl.triplets records go to agl.dlq when set
        self.step = 0
        self.policy_version = 0
        self.offsets: dict[str, int] = {}  # checkpointed positions, "topic:partition" -> offset
        self.done_offsets: dict[str, list[int]] = {}  # records already done past those positions
        self.settled_rollouts: list[str] = []  # the resumed checkpoint's rollouts trained or dropped
        self.extra_state: dict[str, Any] = {}
        self.consumer: Any = None
        self.batcher: Optional[TripletBatcher] = None
        self.last_stats: Optional[StepStats] = None
        self.last_batch: Optional[Batch] = None
        self.deferred_commits = 0  # group commits refused because the group rebalanced meanwhile

    # ---------------------------------------------------------------- lifecycle

    async def start(self, *, resume: bool = True) -> Optional[TrainerState]:
        """Restore the latest checkpoint (if any), join the consumer group and seek to its offsets."""
        from agl_stream.kafka import RecordConsumer

        state = None
        if resume and self.checkpoints is not None:
            state = await asyncio.to_thread(self.checkpoints.load, self.policy)
            if state is not None:
                self.step, self.policy_version = state.step, state.policy_version
                self.offsets = dict(state.offsets)
                self.done_offsets = dict(state.done_offsets)
                self.settled_rollouts = list(state.settled_rollouts)
                self.extra_state = dict(state.extra)
                logger.info("resumed at step %d, policy version %d", self.step, self.policy_version)
        self.consumer = RecordConsumer(self.settings, [self.settings.topic("triplets")], self.group_id)
        await self.consumer.start()
        if self.offsets:
            await wait_for_assignment(self.consumer)
            for tp, offset in offsets_from_json(self.offsets).items():
                if tp in self.consumer.raw.assignment():
                    self.consumer.raw.seek(tp, offset)
        self.batcher = TripletBatcher(
            self.consumer, self.batcher_config, dlq=self.dlq_producer, dlq_topic=self.settings.topic("dlq"),
            already_done=self.done_offsets,
        )
        self.batcher.assembler.remember(self.settled_rollouts)
        return state

    async def stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop(commit=False)  # positions are committed with checkpoints only

    # ---------------------------------------------------------------- one step

    def _check_staleness(self, batch: Batch) -> None:
        bound = self.batcher_config.max_staleness
        if bound is None:
            return
        for traj in batch.trajectories:
            for triplet in traj.triplets:
                if triplet.policy_version is not None and self.policy_version - triplet.policy_version > bound:
                    raise StalenessViolation(
                        f"triplet of {traj.rollout_id} at version {triplet.policy_version} is older than "
                        f"{bound} versions behind {self.policy_version}"
                    )

    async def step_once(self, timeout: float = 5.0, *, force: bool = False) -> Optional[StepMetrics]:
        """Wait up to ``timeout`` for a batch; train on it, bump the version, publish; None if no batch."""
        assert self.batcher is not None, "start() first"
        batch = await self.batcher.next_batch(self.policy_version, timeout, force=force)
        if batch is None:
            return None
        self._check_staleness(batch)
        rows, merges = build_rows(
            batch.trajectories,
            reward_assignment=self.algorithm.reward_assignment,
            max_prompt_length=self.algorithm.max_prompt_length,
            max_response_length=self.algorithm.max_response_length,
            aggregation=self.algorithm.aggregation,
        )
        if not rows:
            self.batcher.done(batch)
            return None
        tensors = collate(rows, self.tokenizer.pad_token_id)
        stats = await asyncio.to_thread(train_step, self.policy, tensors, self.algorithm, self.ref_model)
        self.step += 1
        self.policy_version += 1
        self.batcher.done(batch)
        self.last_stats, self.last_batch = stats, batch
        publish_seconds = 0.0
        if self.publisher is not None and self.step % self.publish_every == 0:
            publish_seconds = (await self.publish()).total_seconds
        if self.checkpoints is not None and self.checkpoint_every:
            if self.step % self.checkpoint_every == 0:
                await self.checkpoint()
        else:  # no checkpoints: nothing to stay consistent with, so move the group on after every step
            await self._commit()
        metrics = self._metrics(stats, batch, publish_seconds, merges)
        self.metrics.write(metrics)
        return metrics

    async def publish(self) -> Any:
        assert self.publisher is not None
        weights = await asyncio.to_thread(lambda: {k: v.clone() for k, v in self.policy.state_dict().items()})
        return await self.publisher.publish(self.policy_version, weights)

    async def checkpoint(self) -> Any:
        """Commit what is done, then write model + optimizer + positions (+ what is done past them) + version.

        A partition's position is its first record not done yet (what the commit covers, or the start
        of what was read when nothing is committable yet); partitions not read since the start keep
        the positions they had.
        """
        assert self.checkpoints is not None and self.batcher is not None
        await self._commit()
        for tp in self.consumer.raw.assignment():
            position = self.consumer.tracker.position(tp)
            if position is not None:
                self.offsets.update(offsets_to_json({tp: position}))
                self.done_offsets[f"{tp.topic}:{tp.partition}"] = self.batcher.done_past(tp, position)
        done = {k: v for k, v in self.done_offsets.items() if v}
        state = TrainerState(self.step, self.policy_version, dict(self.offsets), dict(self.extra_state), done,
                             self.batcher.assembler.settled())  # fmt: skip
        return await asyncio.to_thread(self.checkpoints.save, self.policy, state)

    async def _commit(self) -> None:
        """Commit what is done to the group; a commit the group refuses (it rebalanced) is left for the next one.

        A learner paused past its session timeout (a GC stall, a stopped container) finds its partitions
        handed on: the coordinator refuses the commit until the consumer rejoins, which its next fetch does.
        The checkpoint's own positions are what a resume seeks to, and rollouts already trained are
        remembered (a replay from the group's older offset is a duplicate), so nothing is lost or trained
        twice by carrying on; the group's offsets just lag until the next commit.
        """
        from aiokafka.errors import CommitFailedError

        try:
            await self.consumer.commit()
        except CommitFailedError as exc:
            self.deferred_commits += 1
            logger.warning("the group rebalanced while this learner was away; commit left for the next one: %s",
                           str(exc).splitlines()[0])  # fmt: skip

    def _metrics(self, stats: StepStats, batch: Batch, publish_seconds: float, merges: MergeStats) -> StepMetrics:
        histogram: dict[int, int] = {}
        for age in batch.staleness:
            histogram[age] = histogram.get(age, 0) + 1
        assert self.batcher is not None
        counters = self.batcher.stats
        extra = dict(stats.extra)
        extra.update({
            "pg_clipfrac": stats.pg_clipfrac,
            "optimizer_steps": float(stats.optimizer_steps),
            "step_seconds": stats.seconds,
            "stale_triplets_total": float(counters.stale_triplets),
            "dropped_groups_total": float(counters.dropped_groups),
            "failed_rollouts_total": float(counters.failed_rollouts),
            "groups": float(batch.groups),
            # dynamic sampling: how much of what arrived carried signal, and how many rows actually train
            "zero_variance_groups": float(batch.zero_variance_groups),
            "zero_variance_fraction": batch.zero_variance_fraction,
            "signal_groups": float(batch.signal_groups),
            "effective_batch_size": float(stats.effective_sequences),
            "zero_variance_groups_total": float(counters.zero_variance_groups),
            "deferred_commits_total": float(self.deferred_commits),
            # trajectory aggregation: how many calls merged into a row, how many broke the prefix
            "calls": float(merges.calls),
            "merged_calls": float(merges.merged),
            "merge_rate": merges.merge_rate,
            "prefix_breaks": float(len(merges.breaks)),
            "length_cuts": float(merges.cuts),
            "learner_tokens": float(stats.num_tokens),
            "call_row_tokens": float(merges.call_tokens),  # the same trajectories at one row per call (transition)
            "trajectories": float(len(batch.trajectories)),  # learner_tokens / trajectories: what a rollout costs it
        })
        return StepMetrics(
            step=self.step,
            policy_version=self.policy_version,
            loss=stats.loss,
            policy_loss=stats.pg_loss,
            kl=stats.kl,
            entropy=stats.entropy,
            reward_mean=stats.reward_mean,
            reward_std=stats.reward_std,
            advantage_mean=stats.advantage_mean,
            advantage_std=stats.advantage_std,
            grad_norm=stats.grad_norm,
            tokens_per_second=stats.tokens_per_second,
            staleness_mean=batch.staleness_mean,
            publish_seconds=publish_seconds,
            num_triplets=batch.num_triplets,
            num_sequences=stats.num_sequences,
            learning_rate=stats.learning_rate,
            timestamp=time.time(),
            staleness_histogram=histogram,
            extra=extra,
            rollout_ids=[t.rollout_id for t in batch.trajectories],
        )
