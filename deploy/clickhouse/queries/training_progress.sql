-- title: Training progress
-- description: Learner metrics per optimizer step (published by the learner on agl.training_steps).
-- panel: timeseries
-- time_column: time
-- columns: time, step, policy_version, loss, reward_mean, kl, entropy, grad_norm, tokens_per_second, staleness_mean, publish_seconds
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
    StalenessMean AS staleness_mean,
    PublishSeconds AS publish_seconds
FROM training_steps FINAL
ORDER BY time
