-- title: Spans over time
-- description: Spans (by start time) and distinct rollouts producing them, per minute.
-- panel: timeseries
-- time_column: time
-- columns: time, spans, rollouts
SELECT
    toStartOfMinute(Timestamp) AS time,
    count() AS spans,
    uniqExact(RolloutId) AS rollouts
FROM spans FINAL
GROUP BY time
ORDER BY time
