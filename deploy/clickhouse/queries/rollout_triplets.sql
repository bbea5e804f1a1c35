-- title: Triplets of the rollout
-- description: The (prompt, response, reward) triplets adapted from each attempt's spans, with token counts, the policy version that answered and the state machine's decision (only final triplets are trained).
-- panel: table
-- columns: attempt_id, decision, triplet, policy_version, prompt_tokens, response_tokens, reward, final_reward, has_logprobs, adapter, prompt_token_ids, response_token_ids
SELECT
    AttemptId AS attempt_id,
    Decision AS decision,
    TripletIndex AS triplet,
    PolicyVersion AS policy_version,
    PromptTokens AS prompt_tokens,
    ResponseTokens AS response_tokens,
    Reward AS reward,
    FinalReward AS final_reward,
    HasLogprobs AS has_logprobs,
    Adapter AS adapter,
    arraySlice(PromptTokenIds, 1, 48) AS prompt_token_ids,
    arraySlice(ResponseTokenIds, 1, 48) AS response_token_ids
FROM triplets FINAL
WHERE RolloutId = {rollout_id:String}
ORDER BY AttemptSequenceId, attempt_id, adapter, triplet
