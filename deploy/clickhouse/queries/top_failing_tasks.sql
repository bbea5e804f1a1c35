-- title: Top failing tasks
-- description: Task inputs whose rollouts fail most often, with attempts spent and the last error a runner reported.
-- panel: table
-- columns: task, failed, rollouts, failure_rate, attempts, last_error, last_seen
SELECT
    any(r.Input) AS task,
    countIf(r.Status = 'failed') AS failed,
    count() AS rollouts,
    failed / rollouts AS failure_rate,
    sum(r.Attempts) AS attempts,
    anyIf(e.error, e.error != '') AS last_error,
    max(r.UpdatedAt) AS last_seen
FROM rollouts AS r FINAL
LEFT JOIN
(
    SELECT RolloutId, argMax(Error, Timestamp) AS error
    FROM attempts FINAL
    WHERE Kind = 'finished' AND Error != ''
    GROUP BY RolloutId
) AS e ON r.RolloutId = e.RolloutId
GROUP BY r.TaskKey
HAVING failed > 0
ORDER BY failed DESC, failure_rate DESC
LIMIT 20
