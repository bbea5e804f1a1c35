-- title: Prefix breaks
-- description: Calls whose prompt token ids do not start with the previous call's prompt + response token ids (same attempt, calls with a response, in call order): trajectory aggregation starts a new row at each. first_difference is the first differing position (0-based; the prompt's length when it stops short); expected and found are the tokens there. Most recent first.
-- panel: table
-- columns: time, rollout_id, attempt_id, call, first_difference, expected_length, prompt_length, expected_token, found_token, policy_version
SELECT
    time, rollout_id, attempt_id, call, first_difference, expected_length, prompt_length,
    if(first_difference < expected_length, previous[first_difference + 1], NULL) AS expected_token,
    if(first_difference < prompt_length, prompt[first_difference + 1], NULL) AS found_token,
    policy_version
FROM (
    SELECT
        time, rollout_id, attempt_id, call, prompt, previous, policy_version,
        length(previous) AS expected_length,
        length(prompt) AS prompt_length,
        least(expected_length, prompt_length) AS common,
        arrayFirstIndex(x -> x, arrayMap((a, b) -> a != b, arraySlice(prompt, 1, common), arraySlice(previous, 1, common))) AS differs,
        if(differs > 0, differs - 1, common) AS first_difference,
        differs > 0 OR prompt_length < expected_length AS broken
    FROM (
        SELECT
            coalesce(FinishedAt, CreatedAt) AS time,
            RolloutId AS rollout_id,
            AttemptId AS attempt_id,
            PolicyVersion AS policy_version,
            PromptTokenIds AS prompt,
            row_number() OVER w - 1 AS call,
            lagInFrame(arrayConcat(PromptTokenIds, ResponseTokenIds)) OVER w AS previous
        FROM triplets FINAL
        WHERE ResponseTokens > 0 AND Adapter NOT LIKE 'replay:%'
        WINDOW w AS (PARTITION BY RolloutId, AttemptId, Adapter ORDER BY TripletIndex ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    )
    WHERE call > 0
)
WHERE broken
ORDER BY time DESC, rollout_id, call
LIMIT 200
