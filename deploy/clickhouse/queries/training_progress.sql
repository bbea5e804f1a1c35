-- title: Training progress
-- description: Learner metrics per optimizer step (written by the trainer).
-- panel: timeseries
-- time_column: time
-- columns: time, step, policy_version, loss, reward_mean, kl, entropy, grad_norm, tokens_per_second, staleness_mean
SELECT
    Timestamp AS time,
    Step AS step,
    PolicyVersion AS policy_version,
    Loss AS loss,
    RewardMean AS reward_mean,
    KL AS kl,
    Entropy AS entropy,
    GradNorm AS grad_norm,
    TokensPerSecond AS tokens_per_second,
    StalenessMean AS staleness_mean
FROM training_steps FINAL
ORDER BY time
