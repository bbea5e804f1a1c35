"""GRPO-family policy optimization on token-id triplets, with every loss term taken from verl.

One learner step on a batch of complete groups (cleanrl style, the math in the comments, the
numbers from ``verl.trainer.ppo.core_algos``):

1. Outcome advantages per row (one row = one triplet, or one attempt's merged calls with trajectory
   aggregation; rows of a group share ``index``):
   - ``grpo``:   A_i = (r_i - mean(r_group)) / (std(r_group) + eps)     compute_grpo_outcome_advantage
   - ``drgrpo``: A_i =  r_i - mean(r_group)                             (norm_adv_by_std_in_grpo=False)
   - ``rloo``:   A_i = r_i - mean(r_group without i)                     compute_rloo_outcome_advantage
   - ``reinforce_plus_plus``: discounted returns whitened over the batch compute_reinforce_plus_plus_outcome_advantage
   and A is broadcast over the row's response tokens (masked). With trajectory aggregation the outcome
   estimators see one sample per rollout: a rollout that became several rows (a prefix break, the length
   rule) is scored once and its A copied to each of its rows.
2. Off-policy correction. Rollouts run asynchronously, so the recorded behaviour log-probs
   ``mu`` (from the inference engine) lag the learner. Following decoupled PPO, the proximal
   policy ``pi_old`` is the learner's weights at the start of this step (recomputed), and the
   truncated importance weight ``w = min(exp(log pi_old - log mu), C)`` (C = ``tis_cap``) corrects
   for the gap; rows without recorded log-probs get w = 1. With one update per step
   (``ppo_epochs = mini_batches = 1``) pi_old *is* the weights being differentiated, so log pi_old is
   the same forward pass, detached (ratio = 1, the clip inactive, as in verl's on-policy path): no
   second forward pass over the batch.
3. PPO-clip with dual clip, per token t (``get_policy_loss_fn("vanilla")``):
      ratio = exp(log pi - log pi_old)
      L_clip = max(-A ratio, -A clip(ratio, 1 - eps_low, 1 + eps_high))
      L_pg   = min(L_clip, -A c)  where A < 0   (dual clip, c = ``clip_ratio_c``), else L_clip
      L_pg  *= w
4. Regularizers: entropy H(pi) (``entropy_from_logits``) and the low-variance KL to the frozen
   reference policy k3 = exp(log ref - log pi) - (log ref - log pi) - 1 (``kl_penalty``).
5. loss = agg(L_pg) - entropy_coeff * agg(H) + kl_coef * agg(k3), aggregated by ``agg_loss``
   with ``loss_agg_mode`` (token-mean, seq-mean-token-mean, seq-mean-token-sum, ...) over the
   whole mini-batch, so micro-batch gradient accumulation gives the same gradient as one pass.
   ``rollout-mean-token-mean`` weighs every rollout the same, whatever its rows and tokens:
      loss = 1/N sum_rollouts 1/T_r sum_{t in r} L_t
   computed as verl's ``token-sum`` of L_t * 1/(N T_r) over the mini-batch's N rollouts.

Masks: only response tokens (``response_mask``) enter any term; prompts and padding never train.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

from agl_stream_trainer.algorithms.aggregation import DEFAULT_AGGREGATION, Aggregation
from agl_stream_trainer.algorithms.batch import RewardAssignment, TrainBatch
from agl_stream_trainer.backends.hf import HFPolicy

Estimator = Literal["grpo", "drgrpo", "rloo", "reinforce_plus_plus"]
LossAggMode = Literal["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
                      "rollout-mean-token-mean"]
#: ours, not verl's: weighs each rollout the same (see step 5)
ROLLOUT_MEAN = "rollout-mean-token-mean"


class GRPOConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    estimator: Estimator = "grpo"
    gamma: float = Field(default=1.0, description="discount for reinforce_plus_plus")
    clip_ratio_low: float = Field(default=0.2, gt=0)
    clip_ratio_high: float = Field(default=0.28, gt=0)
    clip_ratio_c: float = Field(default=3.0, gt=1.0, description="dual-clip lower bound of the ratio for A < 0")
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coeff: float = 0.0
    kl_coef: float = Field(default=0.0, ge=0, description="> 0 keeps a frozen reference model")
    kl_type: str = "low_var_kl"
    tis_cap: Optional[float] = Field(default=2.0, gt=0, description="truncated importance sampling cap; None = off")
    ppo_epochs: int = Field(default=1, ge=1)
    mini_batches: int = Field(default=1, ge=1, description="optimizer steps per epoch over the batch")
    reward_assignment: RewardAssignment = "identical"
    aggregation: Aggregation = Field(default=DEFAULT_AGGREGATION, description="a row per attempt's merged calls, or per call")
    rollout_advantage: Optional[bool] = Field(
        default=None, description="score each rollout once, however many rows it has (None: with trajectory aggregation)")
    max_prompt_length: Optional[int] = Field(default=None, ge=1)
    max_response_length: Optional[int] = Field(default=None, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _per_call_rewards_keep_per_call_rows(self) -> "GRPOConfig":
        """``reward_assignment: per_step`` keeps each call's own reward, which needs one row per call: where the
        aggregation is not given it is ``transition`` (given as ``trajectory``, the batch refuses it by name)."""
        if self.reward_assignment == "per_step" and "aggregation" not in self.model_fields_set:
            self.aggregation = "transition"
        return self

    def actor_config(self) -> ActorConfig:
        """The verl actor config the policy-loss function reads (clip ratios, dual clip, aggregation)."""
        return ActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_mini_batch_size=1,
            ppo_micro_batch_size_per_gpu=1,
            use_torch_compile=False,
            clip_ratio=self.clip_ratio_low,
            clip_ratio_low=self.clip_ratio_low,
            clip_ratio_high=self.clip_ratio_high,
            clip_ratio_c=self.clip_ratio_c,
            loss_agg_mode="token-sum" if self.loss_agg_mode == ROLLOUT_MEAN else self.loss_agg_mode,
            entropy_coeff=self.entropy_coeff,
            use_kl_loss=self.kl_coef > 0,
            kl_loss_coef=self.kl_coef,
            kl_loss_type=self.kl_type,
        )


# ---------------------------------------------------------------- step 1: advantages


def compute_advantages(batch: TrainBatch, cfg: GRPOConfig) -> torch.Tensor:
    """(B, R) advantages from verl's outcome estimators, zero outside the response mask."""
    per_rollout = cfg.aggregation == "trajectory" if cfg.rollout_advantage is None else cfg.rollout_advantage
    if per_rollout and cfg.estimator != "reinforce_plus_plus":  # its returns are per token: left per row
        owner = _rollout_of_rows(batch)
        if len(set(owner)) < len(owner):
            return _per_rollout_advantages(batch, cfg, owner)
    return _outcome_advantages(batch.token_level_rewards, batch.response_mask, batch.index, cfg)


def _outcome_advantages(rewards: torch.Tensor, mask: torch.Tensor, index: np.ndarray, cfg: GRPOConfig) -> torch.Tensor:
    if cfg.estimator in ("grpo", "drgrpo"):
        adv, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=rewards,
            response_mask=mask,
            index=index,
            norm_adv_by_std_in_grpo=cfg.estimator == "grpo",
        )
    elif cfg.estimator == "rloo":
        adv, _ = core_algos.compute_rloo_outcome_advantage(
            token_level_rewards=rewards, response_mask=mask, index=index
        )
    else:
        adv, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            token_level_rewards=rewards, response_mask=mask, config=AlgoConfig(gamma=cfg.gamma)
        )
    return adv * mask


def _rollout_of_rows(batch: TrainBatch) -> list[str]:
    return [row.rollout_id or f"row-{i}" for i, row in enumerate(batch.rows)] if batch.rows else \
        [f"row-{i}" for i in range(batch.num_sequences)]  # fmt: skip


def _per_rollout_advantages(batch: TrainBatch, cfg: GRPOConfig, owner: list[str]) -> torch.Tensor:
    """One outcome sample per rollout (its first row's score), A copied to every row of the rollout."""
    first: dict[str, int] = {}
    for i, rollout in enumerate(owner):
        first.setdefault(rollout, i)
    picked = list(first.values())
    scores = batch.scores[picked][:, None]  # (N, 1): an outcome estimator reads only the sum per row
    per_rollout = _outcome_advantages(scores, torch.ones_like(scores), batch.index[picked], cfg)[:, 0]
    slot = {rollout: k for k, rollout in enumerate(first)}
    return per_rollout[[slot[rollout] for rollout in owner]][:, None] * batch.response_mask


def rollout_mean_weights(batch: TrainBatch) -> torch.Tensor:
    """(B, R) token weights 1/(N T_r): each of the batch's N rollouts weighs 1/N, spread over its T_r tokens."""
    owner = _rollout_of_rows(batch)
    tokens: dict[str, float] = {}
    for rollout, count in zip(owner, batch.response_mask.sum(-1).tolist()):
        tokens[rollout] = tokens.get(rollout, 0.0) + count
    live = [r for r, t in tokens.items() if t > 0]
    per_token = torch.tensor([1.0 / (len(live) * tokens[r]) if tokens[r] > 0 else 0.0 for r in owner])
    return per_token[:, None] * batch.response_mask


# ---------------------------------------------------------------- step 2: off-policy correction


def truncated_is_weights(
    old_logprobs: torch.Tensor, batch: TrainBatch, cap: Optional[float]
) -> Optional[torch.Tensor]:
    """w = min(exp(log pi_old - log mu), cap) per token; 1 for rows without recorded logprobs."""
    if cap is None or not bool(batch.has_behaviour_logprobs.any()):
        return None
    log_ratio = (old_logprobs - batch.behaviour_logprobs).clamp(-20.0, 20.0)
    weights = torch.exp(log_ratio).clamp(max=cap)
    weights = torch.where(batch.has_behaviour_logprobs[:, None], weights, torch.ones_like(weights))
    return weights.detach() * batch.response_mask


@dataclass
class Prepared:
    """Everything fixed for the duration of one learner step."""

    batch: TrainBatch
    advantages: torch.Tensor
    old_logprobs: Optional[torch.Tensor]  # None: log pi_old comes from the loss's own forward pass (one update)
    is_weights: Optional[torch.Tensor]
    ref_logprobs: Optional[torch.Tensor]


def single_update(cfg: GRPOConfig) -> bool:
    """One optimizer update per step: pi_old equals the weights the loss differentiates."""
    return cfg.ppo_epochs == 1 and cfg.mini_batches == 1


def prepare(policy: HFPolicy, batch: TrainBatch, cfg: GRPOConfig, ref_model: Any = None, *, reuse_forward: bool = False) -> Prepared:
    """Advantages, log pi_old (unless ``reuse_forward``: the loss's pass gives it), IS weights, reference log-probs."""
    advantages = compute_advantages(batch, cfg)
    ref_logprobs = policy.logprobs(batch, model=ref_model) if cfg.kl_coef > 0 and ref_model is not None else None
    if reuse_forward:
        return Prepared(batch, advantages, None, None, ref_logprobs)
    old_logprobs = policy.logprobs(batch)
    return Prepared(batch, advantages, old_logprobs, truncated_is_weights(old_logprobs, batch, cfg.tis_cap), ref_logprobs)


# ---------------------------------------------------------------- steps 3-5: the loss


@dataclass
class LossTerms:
    loss: torch.Tensor
    pg_loss: float
    entropy: float
    kl: float
    pg_clipfrac: float = 0.0
    ppo_kl: float = 0.0
    is_weight_sum: float = 0.0  # sum of the truncated IS weights over response tokens (for their mean)
    is_weight_tokens: float = 0.0


def loss_terms(
    policy: HFPolicy,
    prep: Prepared,
    rows: torch.Tensor,
    cfg: GRPOConfig,
    actor: ActorConfig,
    global_info: dict[str, Any],
    token_weights: Optional[torch.Tensor] = None,
) -> LossTerms:
    """Loss of rows ``rows`` of ``prep``, normalized by the mini-batch totals in ``global_info``
    (or, for ``rollout-mean-token-mean``, by ``token_weights``: (B, R), see :func:`rollout_mean_weights`)."""
    mb = prep.batch.select(rows)
    out = policy.forward(mb, with_entropy=True, entropy_grad=cfg.entropy_coeff != 0)
    dev = out.logprobs.device
    mask = mb.response_mask.to(dev)
    adv = prep.advantages[rows].to(dev)
    if prep.old_logprobs is None:  # one update per step: pi_old is this very pass
        old = out.logprobs.detach()
        weights = truncated_is_weights(old.cpu(), mb, cfg.tis_cap)
        weights = weights.to(dev) if weights is not None else None
    else:
        old = prep.old_logprobs[rows].to(dev)
        weights = prep.is_weights[rows].to(dev) if prep.is_weights is not None else None

    actor.global_batch_info.clear()
    actor.global_batch_info.update(global_info)
    mode = actor.loss_agg_mode  # verl's; token-sum of weighted tokens for rollout-mean-token-mean
    scale = token_weights[rows].to(dev) if token_weights is not None else None
    policy_loss_fn = core_algos.get_policy_loss_fn("vanilla")
    pg_loss, pg_metrics = policy_loss_fn(
        old_log_prob=old,
        log_prob=out.logprobs,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=mode,
        config=actor,
        rollout_is_weights=weights if scale is None else (scale if weights is None else weights * scale),
    )
    loss = pg_loss
    entropy_value = 0.0
    if out.entropy is not None:
        entropy = core_algos.agg_loss(out.entropy if scale is None else out.entropy * scale, mask, mode, **global_info)
        if cfg.entropy_coeff != 0:
            loss = loss - cfg.entropy_coeff * entropy
        entropy_value = float(entropy.detach())
    kl_value = 0.0
    if prep.ref_logprobs is not None:
        kld = core_algos.kl_penalty(out.logprobs, prep.ref_logprobs[rows].to(dev), cfg.kl_type)
        kl = core_algos.agg_loss(kld if scale is None else kld * scale, mask, mode, **global_info)
        loss = loss + cfg.kl_coef * kl
        kl_value = float(kl.detach())
    return LossTerms(
        loss=loss,
        pg_loss=float(pg_loss.detach()),
        entropy=entropy_value,
        kl=kl_value,
        pg_clipfrac=float(pg_metrics.get("actor/pg_clipfrac", 0.0)),
        ppo_kl=float(pg_metrics.get("actor/ppo_kl", 0.0)),
        is_weight_sum=float((weights * mask).sum()) if weights is not None else float(mask.sum()),
        is_weight_tokens=float(mask.sum()),
    )


def _global_info(batch: TrainBatch, rows: torch.Tensor) -> dict[str, Any]:
    mask = batch.response_mask[rows]
    return {
        "dp_size": 1,
        "batch_num_tokens": int(mask.sum().item()),
        "global_batch_size": int((mask.sum(-1) > 0).sum().item()),
    }


@torch.no_grad()
def evaluate(policy: HFPolicy, prep: Prepared, cfg: GRPOConfig) -> LossTerms:
    """The full-batch loss at the current weights against the step's fixed pi_old and advantages."""
    actor = cfg.actor_config()
    everything = torch.arange(prep.batch.num_sequences)
    info = _global_info(prep.batch, everything)
    weights = _token_weights(prep.batch, everything, cfg)
    total: Optional[LossTerms] = None
    for mb in _micro_rows(policy, prep.batch, everything):
        terms = loss_terms(policy, prep, mb, cfg, actor, info, weights)
        total = terms if total is None else _add(total, terms)
    assert total is not None
    return total


def _token_weights(batch: TrainBatch, rows: torch.Tensor, cfg: GRPOConfig) -> Optional[torch.Tensor]:
    """For ``rollout-mean-token-mean``: (B, R) weights over the mini-batch ``rows`` (0 elsewhere); else None."""
    if cfg.loss_agg_mode != ROLLOUT_MEAN:
        return None
    weights = torch.zeros_like(batch.response_mask)
    weights[rows] = rollout_mean_weights(batch.select(rows))
    return weights


def _add(a: LossTerms, b: LossTerms) -> LossTerms:
    return LossTerms(
        loss=a.loss + b.loss,
        pg_loss=a.pg_loss + b.pg_loss,
        entropy=a.entropy + b.entropy,
        kl=a.kl + b.kl,
        pg_clipfrac=max(a.pg_clipfrac, b.pg_clipfrac),
        ppo_kl=a.ppo_kl + b.ppo_kl,
        is_weight_sum=a.is_weight_sum + b.is_weight_sum,
        is_weight_tokens=a.is_weight_tokens + b.is_weight_tokens,
    )


def _micro_rows(policy: HFPolicy, batch: TrainBatch, rows: torch.Tensor) -> list[torch.Tensor]:
    width = batch.input_ids.shape[1]
    per = max(1, policy.micro_batch_tokens // max(width, 1))
    return [rows[i : i + per] for i in range(0, len(rows), per)]


# ---------------------------------------------------------------- the step


@dataclass
class StepStats:
    loss: float
    pg_loss: float
    entropy: float
    kl: float
    grad_norm: float
    pg_clipfrac: float
    reward_mean: float
    reward_std: float
    advantage_mean: float
    advantage_std: float
    num_sequences: int
    num_tokens: int
    optimizer_steps: int
    seconds: float
    learning_rate: float
    effective_sequences: int = 0  # rows with a non-zero advantage: the ones that move the policy
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else 0.0


def train_step(policy: HFPolicy, batch: TrainBatch, cfg: GRPOConfig, ref_model: Any = None) -> StepStats:
    """One learner step: ``ppo_epochs`` x ``mini_batches`` optimizer updates on ``batch``."""
    started = time.perf_counter()
    policy.model.train()
    prep = prepare(policy, batch, cfg, ref_model, reuse_forward=single_update(cfg))
    actor = cfg.actor_config()
    rng = np.random.default_rng(cfg.seed + int(policy.scheduler.last_epoch))
    sums = {"loss": 0.0, "pg_loss": 0.0, "entropy": 0.0, "kl": 0.0, "clip": 0.0, "grad": 0.0, "w": 0.0, "w_tokens": 0.0}
    updates = 0
    for _epoch in range(cfg.ppo_epochs):
        order = torch.as_tensor(rng.permutation(batch.num_sequences)) if cfg.mini_batches > 1 else torch.arange(batch.num_sequences)
        for rows in torch.tensor_split(order, min(cfg.mini_batches, batch.num_sequences)):
            info = _global_info(batch, rows)
            weights = _token_weights(batch, rows, cfg)
            for micro in _micro_rows(policy, batch, rows):
                terms = loss_terms(policy, prep, micro, cfg, actor, info, weights)
                terms.loss.backward()
                sums["loss"] += float(terms.loss.detach())
                sums["pg_loss"] += terms.pg_loss
                sums["entropy"] += terms.entropy
                sums["kl"] += terms.kl
                sums["clip"] = max(sums["clip"], terms.pg_clipfrac)
                sums["w"] += terms.is_weight_sum
                sums["w_tokens"] += terms.is_weight_tokens
            sums["grad"] += policy.optimizer_step()
            updates += 1
    mask = batch.response_mask.bool()
    adv = prep.advantages[mask]
    scores = batch.scores
    return StepStats(
        loss=sums["loss"] / updates,
        pg_loss=sums["pg_loss"] / updates,
        entropy=sums["entropy"] / updates,
        kl=sums["kl"] / updates,
        grad_norm=sums["grad"] / updates,
        pg_clipfrac=sums["clip"],
        reward_mean=float(scores.mean()),
        reward_std=float(scores.std()) if scores.numel() > 1 else 0.0,
        advantage_mean=float(adv.mean()) if adv.numel() else 0.0,
        advantage_std=float(adv.std()) if adv.numel() > 1 else 0.0,
        num_sequences=batch.num_sequences,
        num_tokens=batch.num_tokens,
        optimizer_steps=updates,
        seconds=time.perf_counter() - started,
        learning_rate=policy.lr,
        effective_sequences=int(((prep.advantages * batch.response_mask).abs().sum(dim=1) > 1e-8).sum()),
        extra={
            "is_weight_mean": sums["w"] / sums["w_tokens"] if sums["w_tokens"] else 1.0,
        },
    )
