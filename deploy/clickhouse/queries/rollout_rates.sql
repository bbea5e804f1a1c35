-- title: Rollout success, failure and retry rates
-- description: Rates among finished rollouts (succeeded, failed, cancelled); retry rate among all rollouts.
-- panel: stat
-- columns: rollouts, in_flight, success_rate, failure_rate, cancel_rate, retry_rate
SELECT
    count() AS rollouts,
    countIf(Status NOT IN ('succeeded', 'failed', 'cancelled')) AS in_flight,
    countIf(Status = 'succeeded') / greatest(countIf(Status IN ('succeeded', 'failed', 'cancelled')), 1) AS success_rate,
    countIf(Status = 'failed') / greatest(countIf(Status IN ('succeeded', 'failed', 'cancelled')), 1) AS failure_rate,
    countIf(Status = 'cancelled') / greatest(countIf(Status IN ('succeeded', 'failed', 'cancelled')), 1) AS cancel_rate,
    countIf(Attempts > 1) / greatest(count(), 1) AS retry_rate
FROM rollouts FINAL
