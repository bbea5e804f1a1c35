"""Triplet trajectories -> padded training tensors (verl's layout: left-padded prompt | right-padded response).

Each triplet becomes one row, or with trajectory aggregation each attempt's merged calls
(``aggregation.py``). ``input_ids`` is ``[pad.. prompt | response ..pad]`` with the prompt
right-aligned at column ``P`` (the longest prompt), so every response token ``j`` sits at column
``P + j`` and is predicted by the logits at column ``P + j - 1``: response tensors are the slice
``[:, P - 1 : P - 1 + R]`` of the shifted log-probabilities, the same for every row.

``response_mask`` marks generated response tokens: only those train (a merged row's context between
calls, and padding, are 0). Rewards are outcome rewards
placed on the last response token (``token_level_rewards``), which is what verl's outcome
advantage estimators expect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Sequence

import numpy as np
import torch

from agl_stream.types import Trajectory, Triplet
from agl_stream_trainer.algorithms.aggregation import Aggregation, MergeStats, segments

RewardAssignment = Literal["identical", "per_step"]


@dataclass
class Row:
    """One triplet ready for tensorization."""

    prompt_ids: list[int]
    response_ids: list[int]
    reward: float
    group: str
    behaviour_logprobs: Optional[list[float]] = None
    policy_version: Optional[int] = None
    rollout_id: str = ""
    loss_mask: Optional[list[int]] = None  #: per response token; None: all 1 (one call's response)
    calls: int = 1  #: the calls merged into this row


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (B, P + R) long
    attention_mask: torch.Tensor  # (B, P + R) long
    position_ids: torch.Tensor  # (B, P + R) long
    response_mask: torch.Tensor  # (B, R) float, 1 on real response tokens
    token_level_rewards: torch.Tensor  # (B, R) float, the row's reward on its last response token
    behaviour_logprobs: torch.Tensor  # (B, R) float, logprobs recorded by the inference engine (0 where unknown)
    has_behaviour_logprobs: torch.Tensor  # (B,) bool
    index: np.ndarray  # (B,) group ids (object array), the GRPO grouping
    policy_versions: torch.Tensor  # (B,) long, -1 where unknown
    prompt_length: int
    rows: list[Row] = field(default_factory=list)

    @property
    def num_sequences(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def response_length(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum().item())

    @property
    def scores(self) -> torch.Tensor:
        return self.token_level_rewards.sum(-1)

    def select(self, idx: torch.Tensor | Sequence[int]) -> "TrainBatch":
        """Rows ``idx`` (mini-batches), keeping the padded width."""
        ix = torch.as_tensor(idx, dtype=torch.long)
        np_ix = ix.numpy()
        return TrainBatch(
            input_ids=self.input_ids[ix],
            attention_mask=self.attention_mask[ix],
            position_ids=self.position_ids[ix],
            response_mask=self.response_mask[ix],
            token_level_rewards=self.token_level_rewards[ix],
            behaviour_logprobs=self.behaviour_logprobs[ix],
            has_behaviour_logprobs=self.has_behaviour_logprobs[ix],
            index=self.index[np_ix],
            policy_versions=self.policy_versions[ix],
            prompt_length=self.prompt_length,
            rows=[self.rows[i] for i in np_ix.tolist()],
        )


def trajectory_reward(trajectory: Trajectory) -> float:
    """The attempt's reward: ``final_reward``, else the last triplet reward that was emitted, else 0."""
    if trajectory.final_reward is not None:
        return float(trajectory.final_reward)
    for triplet in reversed(trajectory.triplets):
        if triplet.reward is not None:
            return float(triplet.reward)
    return 0.0


def rows_from_trajectories(
    trajectories: Sequence[Trajectory],
    *,
    reward_assignment: RewardAssignment = "identical",
    max_prompt_length: Optional[int] = None,
    max_response_length: Optional[int] = None,
    aggregation: Aggregation = "transition",
) -> list[Row]:
    """The rows of :func:`build_rows`, without its merge counts."""
    return build_rows(trajectories, reward_assignment=reward_assignment, max_prompt_length=max_prompt_length,
                      max_response_length=max_response_length, aggregation=aggregation)[0]  # fmt: skip


def build_rows(
    trajectories: Sequence[Trajectory],
    *,
    reward_assignment: RewardAssignment = "identical",
    max_prompt_length: Optional[int] = None,
    max_response_length: Optional[int] = None,
    aggregation: Aggregation = "transition",
) -> tuple[list[Row], MergeStats]:
    """Trajectories -> rows: one per triplet (``transition``) or per merged run of calls (``trajectory``).

    ``identical`` (upstream's assignment): every row of an attempt gets the attempt's reward.
    ``per_step`` (``transition`` only): a triplet with its own reward keeps it; triplets without one get 0.
    Long prompts keep their *last* tokens, long responses their *first* (the behaviour logprobs
    are cut the same way). Triplets with an empty response carry nothing to learn and are skipped.
    """
    if aggregation == "trajectory" and reward_assignment != "identical":
        raise ValueError("per_step rewards need one row per call: use aggregation 'transition'")
    rows: list[Row] = []
    stats = MergeStats()
    for traj in trajectories:
        attempt_reward = trajectory_reward(traj)
        group = traj.group_id or traj.rollout_id
        calls = [t for t in traj.triplets if t.response_token_ids]
        parts, merged = segments(calls, aggregation, rollout_id=traj.rollout_id,
                                 max_prompt_length=max_prompt_length, max_response_length=max_response_length)  # fmt: skip
        stats.add(merged)
        for part, call in zip(parts, calls if aggregation == "transition" else [None] * len(parts)):
            reward = attempt_reward if call is None or reward_assignment == "identical" else _step_reward(call)
            rows.append(Row(part.prompt_ids, part.response_ids, reward, group, part.logprobs, part.policy_version,
                            traj.rollout_id, None if all(part.loss_mask) else part.loss_mask, part.calls))  # fmt: skip
    return rows, stats


def _step_reward(triplet: Triplet) -> float:
    return float(triplet.reward) if triplet.reward is not None else 0.0


def collate(rows: Sequence[Row], pad_token_id: int) -> TrainBatch:
    """Pad rows into a :class:`TrainBatch` (see the module docstring for the layout)."""
    if not rows:
        raise ValueError("cannot build a batch from zero rows")
    bsz = len(rows)
    plen = max(max(len(r.prompt_ids) for r in rows), 1)
    rlen = max(len(r.response_ids) for r in rows)
    input_ids = torch.full((bsz, plen + rlen), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((bsz, plen + rlen), dtype=torch.long)
    response_mask = torch.zeros((bsz, rlen), dtype=torch.float32)
    rewards = torch.zeros((bsz, rlen), dtype=torch.float32)
    behaviour = torch.zeros((bsz, rlen), dtype=torch.float32)
    has_behaviour = torch.zeros(bsz, dtype=torch.bool)
    versions = torch.full((bsz,), -1, dtype=torch.long)
    for i, row in enumerate(rows):
        p, r = len(row.prompt_ids), len(row.response_ids)
        if p:
            input_ids[i, plen - p : plen] = torch.tensor(row.prompt_ids, dtype=torch.long)
        input_ids[i, plen : plen + r] = torch.tensor(row.response_ids, dtype=torch.long)
        attention_mask[i, plen - p : plen + r] = 1
        response_mask[i, :r] = 1.0 if row.loss_mask is None else torch.tensor(row.loss_mask, dtype=torch.float32)
        rewards[i, r - 1] = row.reward
        if row.behaviour_logprobs is not None:
            behaviour[i, :r] = torch.tensor(row.behaviour_logprobs, dtype=torch.float32)
            has_behaviour[i] = True
        if row.policy_version is not None:
            versions[i] = row.policy_version
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_mask=response_mask,
        token_level_rewards=rewards,
        behaviour_logprobs=behaviour,
        has_behaviour_logprobs=has_behaviour,
        index=np.array([r.group for r in rows], dtype=object),
        policy_versions=versions,
        prompt_length=plen,
        rows=list(rows),
    )
