-- title: Training runs
-- description: One row per learner run (published by the learner on agl.training_runs when it starts and ends), newest first. A run that trained fewer learner steps than asked says why in shortfall, e.g. all groups had equal rewards so GRPO had no advantage to learn from.
-- panel: table
-- columns: started, run_id, status, steps, asked_steps, shortfall, stop_reason, aggregation, trained_groups, equal_reward_groups, dropped_groups, failed_rollouts, ended, error
SELECT
    StartedAt AS started,
    RunId AS run_id,
    Status AS status,
    Steps AS steps,
    AskedSteps AS asked_steps,
    Shortfall AS shortfall,
    StopReason AS stop_reason,
    Aggregation AS aggregation,
    TrainedGroups AS trained_groups,
    EqualRewardGroups AS equal_reward_groups,
    DroppedGroups AS dropped_groups,
    FailedRollouts AS failed_rollouts,
    EndedAt AS ended,
    Error AS error
FROM training_runs FINAL
ORDER BY started DESC
LIMIT 100
