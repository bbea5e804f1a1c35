"""Which panels the dashboards show, grouped in sections: one layout for Grafana and ``agl-stream dashboard``.

Every saved query is one panel in exactly one section; Grafana draws a section as a row, the local
page as a group of panels (its tabs show several sections). A saved query this layout does not
name lands in a last section, ``more``. The rollout section's panels take the ``rollout_id``
dashboard variable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    panels: tuple[str, ...]  # saved query names, in display order


MORE = "more"  # the section of saved queries not placed below

SECTIONS: tuple[Section, ...] = (
    Section("overview", "Run overview",
            ("rollout_rates", "throughput", "rollout_outcomes", "throughput_over_time", "stage_latency", "dead_letters_by_reason")),
    Section("rewards", "Rewards",
            ("accuracy_by_policy_version", "reward_by_policy_version", "reward_over_time", "reward_by_resources_version", "trajectory_decisions")),
    Section("training", "Training", ("training_runs", "training_progress", "learning_signal", "trajectory_aggregation", "prefix_breaks")),
    Section("rollouts", "Rollouts", ("recent_rollouts", "rollout_outcomes_over_time", "top_failing_tasks", "workers")),
    Section("data", "Spans and tokens",
            ("spans_over_time", "spans_per_rollout_summary", "spans_per_rollout", "token_counts", "tokens_over_time")),
    Section("rollout", "Rollout detail", ("rollout_attempts", "rollout_spans", "rollout_triplets")),
)  # fmt: skip
