-- title: Rollout outcomes
-- description: Rollouts per current status, their share, and how many needed more than one attempt.
-- panel: table
-- columns: status, rollouts, share, retried
SELECT
    Status AS status,
    count() AS rollouts,
    round(count() / sum(count()) OVER (), 4) AS share,
    countIf(Attempts > 1) AS retried
FROM rollouts FINAL
GROUP BY status
ORDER BY rollouts DESC
