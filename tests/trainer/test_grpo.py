"""The learner's loss and advantages are verl's functions on the same tensors (the wiring is pinned here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from agl_stream.types import Trajectory, Triplet
from agl_stream_trainer.algorithms.batch import collate, rows_from_trajectories
from agl_stream_trainer.algorithms.grpo import (
    GRPOConfig,
    compute_advantages,
    evaluate,
    loss_terms,
    prepare,
    train_step,
    truncated_is_weights,
)
from agl_stream_trainer.backends.hf import HFPolicy, OptimConfig

from .conftest import make_group


def _batch(pad: int = 2):
    trajs = make_group("g1", [1.0, 0.0, 0.0, 1.0], seed=1) + make_group("g2", [0.5, 0.25, 0.0, 0.25], seed=2)
    return collate(rows_from_trajectories(trajs), pad)


def test_layout_masks_only_response_tokens() -> None:
    trajs = make_group("g", [1.0, 0.0], seed=3)
    batch = collate(rows_from_trajectories(trajs), pad_token_id=2)
    for i, traj in enumerate(trajs):
        t = traj.triplets[0]
        r = len(t.response_token_ids)
        assert batch.response_mask[i].sum() == r
        # the response sits right after the prompt column P, prompt right-aligned before it
        assert batch.input_ids[i, batch.prompt_length : batch.prompt_length + r].tolist() == t.response_token_ids
        assert batch.input_ids[i, batch.prompt_length - len(t.prompt_token_ids) : batch.prompt_length].tolist() == t.prompt_token_ids
        # outcome reward on the last response token only
        assert batch.token_level_rewards[i].nonzero().flatten().tolist() in ([r - 1], [])
        assert batch.behaviour_logprobs[i, :r].tolist() == pytest.approx(t.response_logprobs)


def test_grpo_advantages_are_group_normalized_and_masked() -> None:
    batch = _batch()
    adv = compute_advantages(batch, GRPOConfig(estimator="grpo"))
    expected_fn, _ = core_algos.compute_grpo_outcome_advantage(
        batch.token_level_rewards.clone(), batch.response_mask, batch.index
    )
    torch.testing.assert_close(adv, expected_fn * batch.response_mask)
    # independent check of the formula: (r - mean_group) / (std_group + eps), broadcast on response tokens
    for group in ("g1", "g2"):
        rows = np.where(batch.index == group)[0]
        scores = batch.scores[rows]
        want = (scores - scores.mean()) / (scores.std() + 1e-6)
        for row, value in zip(rows, want):
            mask = batch.response_mask[row].bool()
            assert torch.allclose(adv[row][mask], value.expand(int(mask.sum())), atol=1e-5)
            assert torch.all(adv[row][~mask] == 0)


def test_drgrpo_and_reinforce_pp_use_verl() -> None:
    batch = _batch()
    dr = compute_advantages(batch, GRPOConfig(estimator="drgrpo"))
    want, _ = core_algos.compute_grpo_outcome_advantage(
        batch.token_level_rewards.clone(), batch.response_mask, batch.index, norm_adv_by_std_in_grpo=False
    )
    torch.testing.assert_close(dr, want * batch.response_mask)
    rpp = compute_advantages(batch, GRPOConfig(estimator="reinforce_plus_plus"))
    from verl.trainer.config import AlgoConfig

    want, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        batch.token_level_rewards.clone(), batch.response_mask, config=AlgoConfig(gamma=1.0)
    )
    torch.testing.assert_close(rpp, want * batch.response_mask)


def test_multi_turn_identical_and_per_step_rewards() -> None:
    traj = Trajectory(
        rollout_id="ro-x", attempt_id="at-x", group_id="g", final_reward=0.7,
        triplets=[
            Triplet(prompt={"token_ids": [5, 6]}, response={"token_ids": [7]}, reward=0.1),
            Triplet(prompt={"token_ids": [5, 6, 7, 8]}, response={"token_ids": [9, 10]}, reward=None),
        ],
    )
    identical = rows_from_trajectories([traj], reward_assignment="identical")
    assert [r.reward for r in identical] == [0.7, 0.7]
    per_step = rows_from_trajectories([traj], reward_assignment="per_step")
    assert [r.reward for r in per_step] == [0.1, 0.0]


def test_policy_loss_matches_verl_reference_path(tiny) -> None:
    """The full loss (PPO-clip + dual clip + TIS + entropy + low-var KL) against verl functions called directly."""
    model, tokenizer = tiny
    policy = HFPolicy(model, OptimConfig(lr=1e-3))
    cfg = GRPOConfig(entropy_coeff=0.01, kl_coef=0.1, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    batch = _batch(tokenizer.pad_token_id)
    ref = policy.frozen_copy()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01 * torch.randn_like(p))  # a reference that differs, so the KL term is non-zero
    prep = prepare(policy, batch, cfg, ref)
    # perturb pi_old so ratios are not all 1 and the clips matter
    prep.old_logprobs = prep.old_logprobs + 0.5 * torch.randn_like(prep.old_logprobs)
    prep.is_weights = truncated_is_weights(prep.old_logprobs, batch, cfg.tis_cap)
    ours = evaluate(policy, prep, cfg)

    with torch.no_grad():
        out = policy.forward(batch, with_entropy=True)
        logits = policy.model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
        ).logits[:, batch.prompt_length - 1 : batch.prompt_length - 1 + batch.response_length].float()
    mask = batch.response_mask
    # verl's vanilla PPO loss with the truncated-IS weights as rollout_is_weights
    pg_loss, _ = core_algos.compute_policy_loss_vanilla(
        prep.old_logprobs, out.logprobs, prep.advantages, mask, "token-mean", cfg.actor_config(), prep.is_weights
    )
    entropy = core_algos.agg_loss(core_algos.verl_F.entropy_from_logits(logits), mask, "token-mean")
    kl = core_algos.agg_loss(core_algos.kl_penalty(out.logprobs, prep.ref_logprobs, "low_var_kl"), mask, "token-mean")
    want = pg_loss - 0.01 * entropy + 0.1 * kl
    assert ours.kl > 0
    assert float(ours.loss) == pytest.approx(float(want), rel=1e-4, abs=1e-6)
    assert ours.pg_loss == pytest.approx(float(pg_loss), rel=1e-4, abs=1e-6)


def test_dual_clip_caps_negative_advantage_loss() -> None:
    cfg = GRPOConfig(clip_ratio_c=3.0)
    old = torch.zeros(1, 3)
    new = torch.tensor([[3.0, 0.0, -3.0]])  # ratios e^3, 1, e^-3
    adv = torch.full((1, 3), -1.0)
    mask = torch.ones(1, 3)
    loss, _ = core_algos.get_policy_loss_fn("vanilla")(old, new, adv, mask, "token-mean", cfg.actor_config())
    # token 0: max(e^3, 1.28) capped at c=3; token 1: 1; token 2: max(e^-3, 0.8) = 0.8
    assert float(loss) == pytest.approx((3.0 + 1.0 + 0.8) / 3, rel=1e-5)


def test_micro_batches_give_the_same_gradient(tiny) -> None:
    """token-mean over a mini-batch is normalized globally, so accumulation == one pass."""
    model, tokenizer = tiny
    batch = _batch(tokenizer.pad_token_id)
    cfg = GRPOConfig()
    grads = []
    for tokens in (100_000, 1):  # one micro batch vs one row per micro batch
        from agl_stream_trainer.backends.hf import BackendConfig

        policy = HFPolicy(model, OptimConfig(lr=1e-3), BackendConfig(micro_batch_tokens=tokens))
        prep = prepare(policy, batch, cfg)
        prep.old_logprobs = prep.old_logprobs - 0.1  # ratios != 1
        actor = cfg.actor_config()
        rows = torch.arange(batch.num_sequences)
        info = {"dp_size": 1, "batch_num_tokens": int(batch.response_mask.sum()), "global_batch_size": batch.num_sequences}
        from agl_stream_trainer.algorithms.grpo import _micro_rows

        policy.zero_grad()
        for micro in _micro_rows(policy, batch, rows):
            loss_terms(policy, prep, micro, cfg, actor, info).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone())
        policy.zero_grad()
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_train_step_lowers_the_batch_loss(tiny) -> None:
    model, tokenizer = tiny
    policy = HFPolicy(model, OptimConfig(lr=1e-3))
    cfg = GRPOConfig()
    batch = _batch(tokenizer.pad_token_id)
    before_weights = {k: v.clone() for k, v in policy.state_dict().items()}
    prep = prepare(policy, batch, cfg)
    before = evaluate(policy, prep, cfg)
    stats = train_step(policy, batch, cfg)
    after = evaluate(policy, prep, cfg)
    assert float(after.loss) < float(before.loss)
    assert stats.grad_norm > 0 and stats.num_sequences == 8
    assert any(not torch.equal(before_weights[k], v) for k, v in policy.state_dict().items())


def test_truncated_importance_weights() -> None:
    trajs = make_group("g", [1.0, 0.0], seed=4)
    trajs[1].triplets[0].response.pop("logprobs")  # no behaviour logprobs recorded for this row
    batch = collate(rows_from_trajectories(trajs), pad_token_id=2)
    old = batch.behaviour_logprobs + torch.linspace(-1.0, 2.0, batch.response_length)  # pi_old vs mu gaps
    w = truncated_is_weights(old, batch, cap=2.0)
    assert w is not None
    mask0 = batch.response_mask[0].bool()
    gap = torch.linspace(-1.0, 2.0, batch.response_length)[mask0]
    torch.testing.assert_close(w[0][mask0], torch.exp(gap).clamp(max=2.0))  # min(pi_old / mu, C)
    assert torch.all(w[1][batch.response_mask[1].bool()] == 1.0)  # unknown mu: weight 1
    assert torch.all(w[~batch.response_mask.bool()] == 0)
    assert truncated_is_weights(old, batch, cap=None) is None


def test_one_update_per_step_reuses_the_loss_forward_for_pi_old(tiny) -> None:
    """With ppo_epochs = mini_batches = 1, log pi_old from the loss's own pass (detached) gives the same
    loss, gradient and IS weights as a separate no-grad pass - one forward pass fewer per step."""
    model, tokenizer = tiny
    batch = _batch(tokenizer.pad_token_id)
    cfg = GRPOConfig(tis_cap=2.0)
    policy = HFPolicy(model, OptimConfig(lr=1e-3))
    actor = cfg.actor_config()
    rows = torch.arange(batch.num_sequences)
    info = {"dp_size": 1, "batch_num_tokens": int(batch.response_mask.sum()), "global_batch_size": batch.num_sequences}
    results = []
    for reuse in (False, True):
        prep = prepare(policy, batch, cfg, reuse_forward=reuse)
        assert (prep.old_logprobs is None) == reuse
        policy.zero_grad()
        terms = loss_terms(policy, prep, rows, cfg, actor, info)
        terms.loss.backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()
        results.append((float(terms.loss), grad, terms.is_weight_sum / terms.is_weight_tokens))
        policy.zero_grad()
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5, abs=1e-7)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-6)
    assert results[0][2] == pytest.approx(results[1][2], rel=1e-5)
    assert results[0][2] != 1.0  # the behaviour log-probs differ from the policy's: the weights are live


def test_rollout_mean_is_seq_mean_when_each_rollout_is_one_row_and_weighs_rollouts_not_rows(tiny) -> None:
    model, tokenizer = tiny
    policy = HFPolicy(model, OptimConfig(lr=1e-3))
    batch = _batch(tokenizer.pad_token_id)  # one triplet per rollout: one row each
    losses = {}
    for mode in ("rollout-mean-token-mean", "seq-mean-token-mean"):
        cfg = GRPOConfig(loss_agg_mode=mode, entropy_coeff=0.01)
        prep = prepare(policy, batch, cfg)
        prep.old_logprobs = prep.old_logprobs - 0.1  # ratios != 1
        losses[mode] = evaluate(policy, prep, cfg)
    one, other = losses.values()
    assert float(one.loss) == pytest.approx(float(other.loss), rel=1e-5)
    assert one.entropy == pytest.approx(other.entropy, rel=1e-5)
    # a rollout of two rows weighs as much as a rollout of one: its rows' token means count half each
    trajs = make_group("g", [1.0, 0.0], seed=4, turns=2)
    rows = collate(rows_from_trajectories(trajs), tokenizer.pad_token_id)
    cfg = GRPOConfig(loss_agg_mode="rollout-mean-token-mean")
    stats = train_step(HFPolicy(model, OptimConfig(lr=1e-3)), rows, cfg)
    assert stats.grad_norm > 0 and stats.num_sequences == 4
