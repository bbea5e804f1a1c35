-- title: Attempts of the rollout
-- description: Every attempt of one rollout: who ran it, when, how it ended, its spans and its error.
-- panel: table
-- columns: attempt, attempt_id, status, worker_id, started, finished, duration_s, spans, error
SELECT
    a.attempt AS attempt,
    a.AttemptId AS attempt_id,
    a.status AS status,
    a.worker_id AS worker_id,
    a.started AS started,
    a.finished AS finished,
    if(a.finished IS NULL, NULL, dateDiff('millisecond', a.started, a.finished) / 1000) AS duration_s,
    ifNull(s.spans, 0) AS spans,
    a.error AS error
FROM
(
    SELECT
        AttemptId,
        max(AttemptSequenceId) AS attempt,
        if(countIf(Kind = 'finished') = 0, 'running', argMaxIf(Status, Timestamp, Kind = 'finished')) AS status,
        anyIf(WorkerId, WorkerId != '') AS worker_id,
        min(Timestamp) AS started,
        if(countIf(Kind = 'finished') = 0, NULL, maxIf(Timestamp, Kind = 'finished')) AS finished,
        argMaxIf(Error, Timestamp, Kind = 'finished') AS error
    FROM attempts FINAL
    WHERE RolloutId = {rollout_id:String}
    GROUP BY AttemptId
) AS a
LEFT JOIN
(
    SELECT AttemptId, count() AS spans
    FROM spans FINAL
    WHERE RolloutId = {rollout_id:String}
    GROUP BY AttemptId
) AS s ON s.AttemptId = a.AttemptId
ORDER BY attempt, attempt_id
