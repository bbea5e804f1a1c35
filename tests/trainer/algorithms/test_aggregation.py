"""Trajectory aggregation: calls merged by token-id prefix, context masked, breaks and cuts counted, credit per rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agl_stream.types import Trajectory, Triplet
from agl_stream_trainer.algorithms.aggregation import first_difference, segments
from agl_stream_trainer.algorithms.batch import build_rows, collate, rows_from_trajectories
from agl_stream_trainer.algorithms.grpo import GRPOConfig, compute_advantages, rollout_mean_weights

SYSTEM = [1, 2, 3]


def call(prompt: list[int], response: list[int], version: int = 0, logprobs: bool = True) -> Triplet:
    lp = [-0.5] * len(response) if logprobs else None
    return Triplet(prompt={"token_ids": prompt}, response={"token_ids": response, "logprobs": lp}, policy_version=version)


def three_turns() -> list[Triplet]:
    """System prompt, the agent answers, a tool result comes back (context), and so on: each prompt extends the last."""
    first = call(SYSTEM, [10, 11])
    second = call(SYSTEM + [10, 11] + [90, 91], [12], version=1)  # 90, 91: the tool's result and the template
    third = call(SYSTEM + [10, 11, 90, 91, 12] + [92], [13, 14], version=2)
    return [first, second, third]


def test_calls_that_extend_the_prefix_become_one_row_with_the_context_masked() -> None:
    [row], stats = segments(three_turns(), "trajectory", rollout_id="ro-1")
    assert row.prompt_ids == SYSTEM
    assert row.response_ids == [10, 11, 90, 91, 12, 92, 13, 14]
    assert row.loss_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert row.logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5, 0.0, -0.5, -0.5]
    assert row.policy_version == 0 and row.calls == 3  # the oldest version: the staleness that matters
    assert (stats.calls, stats.merged, stats.rows, stats.breaks, stats.cuts) == (3, 2, 1, [], 0)
    assert stats.merge_rate == pytest.approx(2 / 3)


def test_transition_keeps_one_row_per_call() -> None:
    rows, stats = segments(three_turns(), "transition")
    assert [r.prompt_ids for r in rows] == [t.prompt_token_ids for t in three_turns()]
    assert [r.response_ids for r in rows] == [[10, 11], [12], [13, 14]]
    assert stats.merged == 0 and stats.breaks == [] and stats.merge_rate == 0.0


def test_both_modes_count_what_the_calls_cost_as_one_row_each() -> None:
    """``call_tokens``: 5 + 8 + 11 tokens as three rows; the merged row holds 3 + 8 of them."""
    [row], merged = segments(three_turns(), "trajectory")
    rows, alone = segments(three_turns(), "transition")
    assert merged.call_tokens == alone.call_tokens == sum(len(r.prompt_ids) + len(r.response_ids) for r in rows) == 24
    assert len(row.prompt_ids) + len(row.response_ids) == 11


def test_a_prompt_that_rewrites_history_starts_a_new_row_and_is_counted_with_its_first_differing_position() -> None:
    first, second, _ = three_turns()
    rewritten = call(SYSTEM + [10, 77, 90, 91], [12])  # the template re-rendered the agent's answer
    rows, stats = segments([first, rewritten, call(rewritten.prompt_token_ids + [12, 93], [15])], "trajectory", rollout_id="ro-2")
    assert [r.calls for r in rows] == [1, 2]
    assert rows[1].prompt_ids == rewritten.prompt_token_ids and rows[1].loss_mask == [1, 0, 1]
    [broken] = stats.breaks
    assert (broken.rollout_id, broken.call_index, broken.position, broken.expected_length) == ("ro-2", 1, 4, 5)
    assert first_difference([1, 2], [1, 2, 3]) == 2  # a prompt shorter than what came before breaks too
    assert first_difference([1, 2, 3, 4], [1, 2, 3]) is None


def test_the_length_rule_cuts_at_a_call_boundary() -> None:
    rows, stats = segments(three_turns(), "trajectory", max_response_length=5)
    # first row: [10, 11] + [90, 91] + [12] = 5 tokens; the third call would pass 5, so it starts a row of its own
    assert [r.response_ids for r in rows] == [[10, 11, 90, 91, 12], [13, 14]]
    assert rows[1].prompt_ids == three_turns()[2].prompt_token_ids
    assert (stats.merged, stats.cuts, stats.breaks) == (1, 1, [])


def test_a_call_without_behaviour_logprobs_leaves_the_row_on_policy() -> None:
    turns = three_turns()
    turns[1] = call(turns[1].prompt_token_ids, [12], logprobs=False)
    [row], _ = segments(turns, "trajectory")
    assert row.logprobs is None


def _rollout(rollout: str, group: str, reward: float, turns: list[Triplet]) -> Trajectory:
    return Trajectory(rollout_id=rollout, attempt_id="at-" + rollout, group_id=group, final_reward=reward, triplets=turns)


def test_rows_of_a_batch_carry_masks_and_the_reward_on_the_last_generated_token() -> None:
    rows, stats = build_rows([_rollout("ro-a", "g", 1.0, three_turns())], aggregation="trajectory")
    batch = collate(rows, pad_token_id=0)
    assert batch.response_mask[0].tolist() == [1, 1, 0, 0, 1, 0, 1, 1]
    assert batch.token_level_rewards[0].tolist() == [0, 0, 0, 0, 0, 0, 0, 1.0]
    assert batch.num_tokens == 3 + 8  # learner tokens: the prefix once, not once per call
    transition = collate(rows_from_trajectories([_rollout("ro-a", "g", 1.0, three_turns())]), pad_token_id=0)
    assert transition.num_tokens == (3 + 2) + (7 + 1) + (9 + 2)
    with pytest.raises(ValueError, match="per_step"):
        build_rows([], reward_assignment="per_step", aggregation="trajectory")


def test_the_advantage_is_computed_once_per_rollout_however_many_rows_it_became() -> None:
    first, _, _ = three_turns()
    broken = [first, call([4, 4, 4], [12])]  # a prefix break: this rollout becomes two rows
    group = [_rollout("ro-1", "g", 1.0, three_turns()), _rollout("ro-2", "g", 0.0, broken),
             _rollout("ro-3", "g", 0.0, three_turns()), _rollout("ro-4", "g", 1.0, three_turns())]  # fmt: skip
    rows, _ = build_rows(group, aggregation="trajectory")
    assert [r.rollout_id for r in rows] == ["ro-1", "ro-2", "ro-2", "ro-3", "ro-4"]
    batch = collate(rows, pad_token_id=0)
    adv = compute_advantages(batch, GRPOConfig(aggregation="trajectory"))
    per_row = [float(adv[i][batch.response_mask[i].bool()][0]) for i in range(len(rows))]
    scores = np.array([1.0, 0.0, 0.0, 1.0])  # four samples, not five: ro-2 counts once
    want = (scores - scores.mean()) / (scores.std(ddof=1) + 1e-6)
    assert per_row == pytest.approx([want[0], want[1], want[1], want[2], want[3]], abs=1e-5)
    # per row (transition's rule) the same batch would count ro-2 twice and shift every advantage
    counted_twice = compute_advantages(batch, GRPOConfig(aggregation="transition"))
    assert not torch.allclose(counted_twice, adv)


def test_rollout_mean_weights_give_each_rollout_the_same_total() -> None:
    first, _, _ = three_turns()
    group = [_rollout("ro-1", "g", 1.0, three_turns()), _rollout("ro-2", "g", 0.0, [first, call([4], [12, 13, 14])])]
    batch = collate(build_rows(group, aggregation="trajectory")[0], pad_token_id=0)
    weights = rollout_mean_weights(batch)
    assert float(weights.sum()) == pytest.approx(1.0)
    assert float(weights[0].sum()) == pytest.approx(0.5)  # ro-1: one row
    assert float(weights[1:].sum()) == pytest.approx(0.5)  # ro-2: two rows, 5 tokens, 0.1 each
    assert torch.all(weights[batch.response_mask == 0] == 0)


def test_the_default_is_trajectory_and_per_step_rewards_keep_a_row_per_call() -> None:
    assert GRPOConfig().aggregation == "trajectory"
    assert GRPOConfig(reward_assignment="per_step").aggregation == "transition"  # each call's own reward
    assert GRPOConfig(reward_assignment="per_step", aggregation="transition").aggregation == "transition"
    # asked for both, the batch refuses it by name
    assert GRPOConfig(reward_assignment="per_step", aggregation="trajectory").aggregation == "trajectory"
