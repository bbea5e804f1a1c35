"""Why a run trained fewer learner steps than asked, in one sentence for its result, its log and the dashboard.

A run that ends ``succeeded`` after 0 steps looks like a run that learned. It is not: every group's rewards may
have been equal (GRPO has no advantage, and dynamic sampling left them out), groups may have been dropped, or
rollouts failed. :func:`explain_shortfall` names what the batcher saw, e.g. ``0 learner steps: all 16 groups had
equal rewards (16 at 0)``.
"""

from __future__ import annotations

from typing import Optional

from agl_stream_trainer.batching import BatcherStats


def _plural(n: int, word: str) -> str:
    suffix = "es" if word.endswith(("s", "sh", "ch", "x")) else "s"
    return f"{n} {word}{'' if n == 1 else suffix}"


def explain_shortfall(steps: int, asked: Optional[int], stop_reason: Optional[str], stats: BatcherStats) -> Optional[str]:
    """None when the run trained what it was asked (``asked`` steps, or at least one when no count was asked)."""
    if (asked is not None and steps >= asked) or (asked is None and steps > 0):
        return None
    head = _plural(steps, "learner step") + (f" of {asked} asked" if asked is not None else "")
    groups = stats.trained_groups + stats.dropped_groups + stats.left_out_groups
    flat = stats.zero_variance_groups
    reasons: list[str] = []
    if flat:
        rewards = ", ".join(f"{n} at {r:g}" for r, n in stats.zero_variance_rewards.most_common())
        share = f"all {groups}" if flat >= groups else f"{flat} of {groups}"
        reasons.append(f"{share} groups had equal rewards ({rewards})" +
                       (", so GRPO had no advantage to learn from" if flat >= groups else ""))  # fmt: skip
    if stats.dropped_groups:
        reasons.append(_plural(stats.dropped_groups, "group") + " dropped (too few members after a timeout or the staleness bound)")
    if stats.failed_rollouts:
        reasons.append(_plural(stats.failed_rollouts, "rollout") + " failed (never trained)")
    if not groups and not stats.failed_rollouts:
        reasons.append("no training trajectory arrived")
    why = "; ".join(reasons) or f"{_plural(stats.batches, 'batch')} formed"
    return f"{head}: {why}" + (f" (stopped: {stop_reason})" if stop_reason else "")
