-- title: Reward per resources version
-- description: Final reward per resources id (LLM endpoint / prompt template version) the rollouts ran with.
-- panel: table
-- columns: resources_id, resources_version, policy_version, trajectories, mean_final_reward, first_seen
SELECT
    t.ResourcesId AS resources_id,
    r.Version AS resources_version,
    r.PolicyVersion AS policy_version,
    count() AS trajectories,
    avg(t.final_reward) AS mean_final_reward,
    min(t.seen) AS first_seen
FROM
(
    SELECT RolloutId, AttemptId, any(ResourcesId) AS ResourcesId, any(FinalReward) AS final_reward, min(InsertedAt) AS seen
    FROM triplets FINAL
    WHERE Adapter NOT LIKE 'replay:%' AND Decision = 'final'
    GROUP BY RolloutId, AttemptId
) AS t
LEFT JOIN
(
    SELECT ResourcesId, max(Version) AS Version, max(PolicyVersion) AS PolicyVersion
    FROM resources FINAL
    GROUP BY ResourcesId
) AS r ON t.ResourcesId = r.ResourcesId
GROUP BY resources_id, resources_version, policy_version
ORDER BY first_seen
