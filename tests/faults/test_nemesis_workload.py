"""The nemesis's workload: trainable tokens change nothing else in a task's plan; requests make GRPO groups."""

from __future__ import annotations

import agl_stream.semconv as semconv
from tests.benchmarks.workload_agent import make_tasks, plan
from tests.faults.nemesis.run import NEMESIS_RETRIES, enqueue_items
from tests.faults.nemesis.services import GROUP_SIZE


def test_tokens_are_added_without_changing_the_rest_of_the_plan() -> None:
    plain, with_tokens = make_tasks(20, seed=3), make_tasks(20, seed=3, tokens=8)
    assert [{k: v for k, v in t.items() if k != "tokens"} for t in with_tokens] == plain
    for a, b in zip(plain, with_tokens):
        pa, pb = plan(a), plan(b)
        assert (pa.rounds, pa.final_reward, pa.spans, pa.triplets) == (pb.rounds, pb.final_reward, pb.spans, pb.triplets)
        assert pa.tokens == [] and len(pb.tokens) == len(pb.rounds)
        for tokens in pb.tokens:
            attrs = tokens.attributes()
            assert len(attrs[semconv.PROMPT_TOKEN_IDS]) == len(attrs[semconv.RESPONSE_TOKEN_IDS]) == 8
            assert len(attrs[semconv.RESPONSE_LOGPROBS]) == 8 and all(v < 0 for v in attrs[semconv.RESPONSE_LOGPROBS])
        assert plan(b) == pb  # a pure function of the task


def test_consecutive_tasks_form_groups_across_requests() -> None:
    tasks = make_tasks(12, seed=1)
    first, second = enqueue_items(tasks[:6], 0, "n"), enqueue_items(tasks[6:], 6, "n")
    groups = [item["metadata"]["group_id"] for item in first + second]
    assert groups == [f"n-g{i // GROUP_SIZE:06d}" for i in range(12)]
    assert all(item["mode"] == "train" for item in first + second)
    assert first[0]["config"]["max_attempts"] == NEMESIS_RETRIES.max_attempts
