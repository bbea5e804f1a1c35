-- title: Spans per rollout (largest)
-- description: The rollouts with the most spans, with their attempts, LLM calls and span time range.
-- panel: table
-- columns: rollout_id, attempts, spans, llm_calls, first_span, last_span
SELECT
    RolloutId AS rollout_id,
    uniqExact(AttemptId) AS attempts,
    count() AS spans,
    countIf(SpanName = 'openai.chat.completion') AS llm_calls,
    min(Timestamp) AS first_span,
    max(Timestamp) AS last_span
FROM spans FINAL
GROUP BY rollout_id
ORDER BY spans DESC, rollout_id
LIMIT 50
