"""Task success, apart from shaped reward: accuracy (pass@1) and pass@k of an evaluation.

An evaluation answers every held-out item ``k`` times. Whether one answer *succeeded* is the reward
dimension named ``success_key`` (``"correct"`` by default: an agent emits
``emit_reward({"correct": 1.0, "format": 0.5, ...}, primary_key=...)``), and for agents that only
return a number, a final reward of at least ``success_threshold``. A shaped reward that mixes
format and correctness is therefore never mistaken for success; its parts are averaged one by one.

pass@k uses the unbiased estimator of Chen et al. (2021): with ``n`` samples of which ``c`` are
right, pass@k = 1 - C(n - c, k) / C(n, k).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Optional, Sequence

from agl_stream.algorithm.results import RolloutResult

DEFAULT_SUCCESS_KEY = "correct"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` samples drawn from ``n`` (``c`` right) is right."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass@k needs 0 <= c <= n and k >= 1 (n={n}, c={c}, k={k})")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per item, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def succeeded(outcome: Optional[RolloutResult], success_key: str = DEFAULT_SUCCESS_KEY, threshold: float = 1.0) -> float:
    """1.0 when the rollout solved its task, else 0.0 (failed or missing rollouts did not)."""
    if outcome is None or outcome.status != "succeeded":
        return 0.0
    if success_key in outcome.reward_dimensions:
        return float(outcome.reward_dimensions[success_key] >= threshold)
    return float(outcome.final_reward is not None and outcome.final_reward >= threshold)


@dataclass(frozen=True)
class SuccessReport:
    """One evaluation's task success. ``per_item`` is each item's success rate over its samples."""

    samples: int  # answers per item
    per_item: list[float]
    per_item_reward: list[float]
    pass_at: dict[int, float]  # k -> mean pass@k over items
    parts: dict[str, float] = field(default_factory=dict)  # mean of every reward dimension

    @property
    def accuracy(self) -> float:
        return statistics.fmean(self.per_item) if self.per_item else 0.0

    @property
    def mean_reward(self) -> float:
        return statistics.fmean(self.per_item_reward) if self.per_item_reward else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"samples": self.samples, "accuracy": self.accuracy, "mean_reward": self.mean_reward,
                "pass_at": {str(k): v for k, v in self.pass_at.items()}, "parts": dict(self.parts),
                "per_item": list(self.per_item)}  # fmt: skip


def success_report(
    outcomes: Sequence[Sequence[Optional[RolloutResult]]],
    *,
    success_key: str = DEFAULT_SUCCESS_KEY,
    threshold: float = 1.0,
) -> SuccessReport:
    """``outcomes[i]`` are the ``k`` answers to item ``i`` (None where none arrived)."""
    if not outcomes or any(len(o) != len(outcomes[0]) for o in outcomes) or not outcomes[0]:
        raise ValueError("success_report needs the same non-zero number of samples for every item")
    k = len(outcomes[0])
    per_item, per_item_reward, pass_at = [], [], {}
    parts: dict[str, list[float]] = {}
    counts = []
    for answers in outcomes:
        wins = [succeeded(o, success_key, threshold) for o in answers]
        counts.append(int(sum(wins)))
        per_item.append(statistics.fmean(wins))
        per_item_reward.append(statistics.fmean(
            o.final_reward if o is not None and o.final_reward is not None and o.status == "succeeded" else 0.0
            for o in answers))  # fmt: skip
        for o in answers:
            for name, value in (o.reward_dimensions if o is not None else {}).items():
                parts.setdefault(name, []).append(float(value))
    for j in sorted({1, k}):
        pass_at[j] = statistics.fmean(pass_at_k(k, c, j) for c in counts)
    return SuccessReport(k, per_item, per_item_reward, pass_at, {n: statistics.fmean(v) for n, v in sorted(parts.items())})
