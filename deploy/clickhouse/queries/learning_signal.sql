-- title: Learning signal per step
-- description: Whether each learner step could learn: groups whose rewards were all equal carry no GRPO advantage (zero-variance groups; with dynamic sampling they are left out and replaced), the fraction of groups looked at that had no signal, the rows with a non-zero advantage (effective batch size) and the gradient norm (0 means the step changed nothing).
-- panel: timeseries
-- time_column: time
-- columns: time, step, policy_version, reward_mean, tokens_per_second, signal_groups, zero_variance_groups, zero_variance_fraction, effective_batch_size, sequences, grad_norm, zero_gradient
SELECT
    Timestamp AS time,
    Step AS step,
    PolicyVersion AS policy_version,
    RewardMean AS reward_mean,
    TokensPerSecond AS tokens_per_second,
    Extra['signal_groups'] AS signal_groups,
    Extra['zero_variance_groups'] AS zero_variance_groups,
    Extra['zero_variance_fraction'] AS zero_variance_fraction,
    Extra['effective_batch_size'] AS effective_batch_size,
    NumSequences AS sequences,
    GradNorm AS grad_norm,
    GradNorm = 0 AS zero_gradient
FROM training_steps FINAL
ORDER BY time
