"""A run that trains fewer steps than asked says why, from what the batcher counted."""

from __future__ import annotations

from collections import Counter

from agl_stream_trainer.batching import BatcherStats
from agl_stream_trainer.shortfall import explain_shortfall


def test_a_run_that_trained_what_it_was_asked_says_nothing() -> None:
    assert explain_shortfall(6, 6, "max_steps", BatcherStats()) is None
    assert explain_shortfall(3, None, "dataset done", BatcherStats()) is None


def test_zero_steps_because_every_group_had_equal_rewards() -> None:
    stats = BatcherStats(zero_variance_groups=16, left_out_groups=16, zero_variance_rewards=Counter({0.0: 16}))
    assert explain_shortfall(0, None, "dataset done", stats) == (
        "0 learner steps: all 16 groups had equal rewards (16 at 0), so GRPO had no advantage to learn from "
        "(stopped: dataset done)")  # fmt: skip


def test_fewer_steps_than_asked_names_each_cause() -> None:
    stats = BatcherStats(trained_groups=2, batches=1, zero_variance_groups=5, left_out_groups=5, dropped_groups=1,
                         failed_rollouts=3, zero_variance_rewards=Counter({1.0: 4, 0.0: 1}))  # fmt: skip
    assert explain_shortfall(1, 6, "time budget: 360s of training", stats) == (
        "1 learner step of 6 asked: 5 of 8 groups had equal rewards (4 at 1, 1 at 0); 1 group dropped (too few "
        "members after a timeout or the staleness bound); 3 rollouts failed (never trained) "
        "(stopped: time budget: 360s of training)")  # fmt: skip
    assert explain_shortfall(0, 4, None, BatcherStats()) == "0 learner steps of 4 asked: no training trajectory arrived"


def test_the_batch_count_reads_as_english() -> None:
    stats = BatcherStats(trained_groups=6, batches=3)
    assert "3 batches formed" in (explain_shortfall(3, 6, "time budget", stats) or "")
