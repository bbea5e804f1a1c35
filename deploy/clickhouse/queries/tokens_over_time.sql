-- title: Tokens over time
-- description: Prompt and response tokens stored per minute (training throughput in tokens).
-- panel: timeseries
-- time_column: time
-- columns: time, prompt_tokens, response_tokens
SELECT
    toStartOfMinute(InsertedAt) AS time,
    sum(PromptTokens) AS prompt_tokens,
    sum(ResponseTokens) AS response_tokens
FROM triplets FINAL
WHERE Adapter NOT LIKE 'replay:%'
GROUP BY time
ORDER BY time
