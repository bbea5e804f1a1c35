-- title: Recent rollouts
-- description: The newest rollouts with their status, attempts, spans and the final reward of the attempt that ended them.
-- panel: table
-- columns: rollout_id, status, mode, attempts, spans, final_reward, started, duration_s, input
WITH recent AS
(
    SELECT RolloutId, Status, Mode, Attempts, StartTime, EndTime, UpdatedAt, Input
    FROM rollouts FINAL
    ORDER BY StartTime DESC
    LIMIT 100
)
SELECT
    r.RolloutId AS rollout_id,
    r.Status AS status,
    r.Mode AS mode,
    r.Attempts AS attempts,
    s.spans AS spans,
    t.final_reward AS final_reward,
    r.StartTime AS started,
    dateDiff('millisecond', r.StartTime, coalesce(r.EndTime, r.UpdatedAt)) / 1000 AS duration_s,
    substring(r.Input, 1, 160) AS input
FROM recent AS r
LEFT JOIN
(
    SELECT RolloutId, count() AS spans
    FROM spans FINAL
    WHERE RolloutId IN (SELECT RolloutId FROM recent)
    GROUP BY RolloutId
) AS s ON s.RolloutId = r.RolloutId
LEFT JOIN
(
    SELECT RolloutId, argMax(FinalReward, AttemptSequenceId) AS final_reward
    FROM triplets FINAL
    WHERE Adapter NOT LIKE 'replay:%' AND Decision = 'final' AND RolloutId IN (SELECT RolloutId FROM recent)
    GROUP BY RolloutId
) AS t ON t.RolloutId = r.RolloutId
ORDER BY r.StartTime DESC, r.RolloutId
