-- title: Throughput
-- description: Rollouts finishing and spans arriving per second, over the last minute and over the whole run.
-- panel: stat
-- columns: rollouts_per_s_1m, spans_per_s_1m, rollouts_per_s, spans_per_s, run_seconds
WITH
    r AS
    (
        SELECT
            min(StartTime) AS first_start,
            max(UpdatedAt) AS last_update,
            countIf(Status IN ('succeeded', 'failed', 'cancelled')) AS finished,
            countIf(Status IN ('succeeded', 'failed', 'cancelled') AND UpdatedAt >= now64(6) - INTERVAL 60 SECOND) AS finished_1m
        FROM rollouts FINAL
    ),
    s AS
    (
        SELECT count() AS spans, countIf(InsertedAt >= now64(3) - INTERVAL 60 SECOND) AS spans_1m
        FROM spans FINAL
    )
SELECT
    r.finished_1m / 60 AS rollouts_per_s_1m,
    s.spans_1m / 60 AS spans_per_s_1m,
    r.finished / greatest(dateDiff('millisecond', r.first_start, r.last_update) / 1000, 1) AS rollouts_per_s,
    s.spans / greatest(dateDiff('millisecond', r.first_start, r.last_update) / 1000, 1) AS spans_per_s,
    greatest(dateDiff('second', r.first_start, r.last_update), 0) AS run_seconds
FROM r CROSS JOIN s
