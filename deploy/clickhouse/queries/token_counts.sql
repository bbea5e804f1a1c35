-- title: Token counts per policy version
-- description: Prompt and response tokens of live triplets per policy version.
-- panel: table
-- columns: policy_version, triplets, prompt_tokens, response_tokens, mean_prompt_tokens, mean_response_tokens
SELECT
    PolicyVersion AS policy_version,
    count() AS triplets,
    sum(PromptTokens) AS prompt_tokens,
    sum(ResponseTokens) AS response_tokens,
    avg(PromptTokens) AS mean_prompt_tokens,
    avg(ResponseTokens) AS mean_response_tokens
FROM triplets FINAL
WHERE Adapter NOT LIKE 'replay:%' AND Decision = 'final'
GROUP BY policy_version
ORDER BY policy_version
