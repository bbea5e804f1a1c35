-- title: Finished rollouts over time
-- description: Rollouts reaching a final status each minute, by status, and how many of them were retried.
-- panel: timeseries
-- time_column: time
-- columns: time, succeeded, failed, cancelled, retried
SELECT
    toStartOfMinute(UpdatedAt) AS time,
    countIf(Status = 'succeeded') AS succeeded,
    countIf(Status = 'failed') AS failed,
    countIf(Status = 'cancelled') AS cancelled,
    countIf(Attempts > 1) AS retried
FROM rollouts FINAL
WHERE Status IN ('succeeded', 'failed', 'cancelled')
GROUP BY time
ORDER BY time
