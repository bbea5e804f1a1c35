-- title: Reward per policy version
-- description: Trajectories, triplets and final reward of live (non-replay) trajectories that ended their rollout (superseded attempts left out), per policy version that produced them.
-- panel: table
-- columns: policy_version, trajectories, triplets, mean_final_reward, min_final_reward, max_final_reward, first_seen, last_seen
SELECT
    policy_version,
    count() AS trajectories,
    sum(n) AS triplets,
    avg(final_reward) AS mean_final_reward,
    min(final_reward) AS min_final_reward,
    max(final_reward) AS max_final_reward,
    min(seen) AS first_seen,
    max(seen) AS last_seen
FROM
(
    SELECT RolloutId, AttemptId, min(PolicyVersion) AS policy_version, any(FinalReward) AS final_reward,
           count() AS n, min(InsertedAt) AS seen
    FROM triplets FINAL
    WHERE Adapter NOT LIKE 'replay:%' AND Decision = 'final'
    GROUP BY RolloutId, AttemptId
)
GROUP BY policy_version
ORDER BY policy_version
