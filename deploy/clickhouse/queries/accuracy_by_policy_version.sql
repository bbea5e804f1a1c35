-- title: Held-out accuracy per policy version
-- description: Task success on evaluation rollouts (mode val), apart from shaped reward: accuracy (pass@1, the fraction of right answers), pass@k over the k samples of each item, the mean final reward, and the mean of each reward dimension the agent reported (reward_parts, JSON). An answer is right when its reward dimension 'correct' is 1 (agents that emit only a number: a final reward of 1). Rollouts that never reached an LLM call leave no triplet and are not counted here; the trainer's report counts them as wrong.
-- panel: table
-- columns: policy_version, evaluation, items, samples_per_item, answers, accuracy, pass_at_k, mean_final_reward, reward_parts
SELECT
    policy_version,
    evaluation,
    uniqExact(item) AS items,
    max(samples) AS samples_per_item,
    sum(samples) AS answers,
    sum(right) / sum(samples) AS accuracy,
    avg(right > 0) AS pass_at_k,
    sum(reward_sum) / sum(samples) AS mean_final_reward,
    toJSONString(mapApply((k, v) -> (k, round(v / greatest(sum(with_parts), 1), 4)), sumMap(parts_sum))) AS reward_parts
FROM
(
    SELECT policy_version, evaluation, item, count() AS samples, sum(success) AS right,
           sum(final_reward) AS reward_sum, sumMap(parts) AS parts_sum, countIf(length(parts) > 0) AS with_parts
    FROM
    (
        SELECT RolloutId, AttemptId,
               min(PolicyVersion) AS policy_version,
               any(JSONExtractString(TrajectoryMetadata, 'rollout_metadata', 'eval')) AS evaluation,
               any(if(JSONHas(TrajectoryMetadata, 'rollout_metadata', 'item_index'),
                      toString(JSONExtractInt(TrajectoryMetadata, 'rollout_metadata', 'item_index')), RolloutId)) AS item,
               any(if(JSONHas(TrajectoryMetadata, 'reward_dimensions', 'correct'),
                      JSONExtractFloat(TrajectoryMetadata, 'reward_dimensions', 'correct') >= 1,
                      ifNull(FinalReward, 0) >= 1)) AS success,
               any(ifNull(FinalReward, 0)) AS final_reward,
               any(JSONExtract(TrajectoryMetadata, 'reward_dimensions', 'Map(String, Float64)')) AS parts
        FROM triplets FINAL
        WHERE Mode = 'val' AND Adapter NOT LIKE 'replay:%' AND Decision = 'final' AND Status = 'succeeded'
        GROUP BY RolloutId, AttemptId
    )
    GROUP BY policy_version, evaluation, item
)
GROUP BY policy_version, evaluation
ORDER BY policy_version, evaluation
