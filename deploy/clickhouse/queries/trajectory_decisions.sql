-- title: Trajectories by decision
-- description: Live trajectories per hour by the state machine's decision: final (the attempt that ended its rollout, trained), superseded (a retried attempt that reported late, kept for analysis), undecided.
-- panel: timeseries
-- time_column: time
-- columns: time, final, superseded, undecided
SELECT
    toStartOfHour(seen) AS time,
    countIf(decision = 'final') AS final,
    countIf(decision = 'superseded') AS superseded,
    countIf(decision = 'undecided') AS undecided
FROM
(
    SELECT RolloutId, AttemptId, any(Decision) AS decision, min(InsertedAt) AS seen
    FROM triplets FINAL
    WHERE Adapter NOT LIKE 'replay:%'
    GROUP BY RolloutId, AttemptId
)
GROUP BY time
ORDER BY time
