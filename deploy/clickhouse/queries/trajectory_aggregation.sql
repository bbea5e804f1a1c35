-- title: Trajectory aggregation per step
-- description: How the learner's rows were made each step: calls (triplets with a response), calls merged into the previous call's row (their prompt extended its prompt + response), the merge rate (merged / calls), prefix breaks (a call whose prompt did not extend the previous one: a chat template that re-renders history, a harness that edits its context; saved query prefix_breaks lists them), cuts at the length limit, and the learner's tokens (prompt and response, padding excluded). With transition aggregation nothing merges.
-- panel: timeseries
-- time_column: time
-- columns: time, step, calls, merged_calls, merge_rate, prefix_breaks, length_cuts, rows, learner_tokens, tokens_per_row
SELECT
    Timestamp AS time,
    Step AS step,
    Extra['calls'] AS calls,
    Extra['merged_calls'] AS merged_calls,
    Extra['merge_rate'] AS merge_rate,
    Extra['prefix_breaks'] AS prefix_breaks,
    Extra['length_cuts'] AS length_cuts,
    NumSequences AS rows,
    Extra['learner_tokens'] AS learner_tokens,
    if(NumSequences > 0, Extra['learner_tokens'] / NumSequences, 0) AS tokens_per_row
FROM training_steps FINAL
ORDER BY time
