-- title: Throughput over time
-- description: Rollouts reaching a final status and spans stored, per second, in 10-second buckets.
-- panel: timeseries
-- time_column: time
-- columns: time, rollouts_per_s, spans_per_s
SELECT
    time,
    sum(finished) / 10 AS rollouts_per_s,
    sum(stored) / 10 AS spans_per_s
FROM
(
    SELECT toDateTime(toStartOfInterval(UpdatedAt, INTERVAL 10 SECOND), 'UTC') AS time, count() AS finished, 0 AS stored
    FROM rollouts FINAL
    WHERE Status IN ('succeeded', 'failed', 'cancelled')
    GROUP BY time
    UNION ALL
    SELECT toDateTime(toStartOfInterval(InsertedAt, INTERVAL 10 SECOND), 'UTC') AS time, 0 AS finished, count() AS stored
    FROM spans FINAL
    GROUP BY time
)
GROUP BY time
ORDER BY time
