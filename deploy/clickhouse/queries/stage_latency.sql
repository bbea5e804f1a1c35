-- title: Latency per stage
-- description: Seconds from enqueue to the first attempt start, from attempt start to finish, and from attempt finish to its first triplet row in ClickHouse.
-- panel: table
-- columns: stage, samples, p50_s, p90_s, p99_s, max_s
WITH
    started AS (SELECT RolloutId, AttemptId, min(Timestamp) AS t FROM attempts FINAL WHERE Kind = 'started' GROUP BY RolloutId, AttemptId),
    finished AS (SELECT RolloutId, AttemptId, max(Timestamp) AS t FROM attempts FINAL WHERE Kind = 'finished' GROUP BY RolloutId, AttemptId),
    first_start AS (SELECT RolloutId, min(t) AS t FROM started GROUP BY RolloutId),
    enqueued AS (SELECT RolloutId, StartTime AS t FROM rollouts FINAL),
    stored AS (SELECT RolloutId, AttemptId, min(InsertedAt) AS t FROM triplets FINAL WHERE Adapter NOT LIKE 'replay:%' GROUP BY RolloutId, AttemptId),
    samples AS
    (
        SELECT 1 AS ord, 'enqueue_to_start' AS stage, toFloat64(s.t) - toFloat64(e.t) AS seconds
        FROM enqueued AS e INNER JOIN first_start AS s ON e.RolloutId = s.RolloutId
        UNION ALL
        SELECT 2, 'start_to_finish', toFloat64(f.t) - toFloat64(s.t)
        FROM started AS s INNER JOIN finished AS f ON s.RolloutId = f.RolloutId AND s.AttemptId = f.AttemptId
        UNION ALL
        SELECT 3, 'finish_to_triplet_row', toFloat64(r.t) - toFloat64(f.t)
        FROM finished AS f INNER JOIN stored AS r ON f.RolloutId = r.RolloutId AND f.AttemptId = r.AttemptId
    )
SELECT
    stage,
    count() AS samples,
    quantileExact(0.5)(seconds) AS p50_s,
    quantileExact(0.9)(seconds) AS p90_s,
    quantileExact(0.99)(seconds) AS p99_s,
    max(seconds) AS max_s
FROM samples
GROUP BY ord, stage
ORDER BY ord
