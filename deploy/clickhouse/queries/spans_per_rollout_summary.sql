-- title: Spans per rollout (distribution)
-- description: How many spans a rollout produces: mean, median, p99 and maximum.
-- panel: stat
-- columns: rollouts, spans, mean_spans, p50_spans, p99_spans, max_spans
SELECT
    count() AS rollouts,
    sum(n) AS spans,
    avg(n) AS mean_spans,
    quantileExact(0.5)(n) AS p50_spans,
    quantileExact(0.99)(n) AS p99_spans,
    max(n) AS max_spans
FROM (SELECT RolloutId, count() AS n FROM spans FINAL GROUP BY RolloutId)
