-- title: Runner workers
-- description: Latest heartbeat of every runner worker and what it is running.
-- panel: table
-- columns: worker_id, status, last_heartbeat, current_rollout_id, current_attempt_id
SELECT
    WorkerId AS worker_id,
    Status AS status,
    LastHeartbeatTime AS last_heartbeat,
    CurrentRolloutId AS current_rollout_id,
    CurrentAttemptId AS current_attempt_id
FROM workers FINAL
ORDER BY worker_id
