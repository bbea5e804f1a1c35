-- title: Reward over time
-- description: Mean final reward of the trajectories stored each minute, with the newest policy version among them.
-- panel: timeseries
-- time_column: time
-- columns: time, mean_final_reward, trajectories, policy_version
SELECT
    toStartOfMinute(seen) AS time,
    avg(final_reward) AS mean_final_reward,
    count() AS trajectories,
    max(policy_version) AS policy_version
FROM
(
    SELECT RolloutId, AttemptId, min(PolicyVersion) AS policy_version, any(FinalReward) AS final_reward,
           min(InsertedAt) AS seen
    FROM triplets FINAL
    WHERE Adapter NOT LIKE 'replay:%' AND Decision = 'final'
    GROUP BY RolloutId, AttemptId
)
GROUP BY time
ORDER BY time
