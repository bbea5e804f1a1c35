"""Golden tests of TracerTraceToTriplet / TraceTree on hand-built spans with known token ids and rewards."""

from __future__ import annotations

import pytest

from agl_stream import semconv
from agl_stream.adapter import (
    RewardMatchPolicy,
    TracerTraceToTriplet,
    TraceTree,
    Transition,
    find_final_reward,
    group_spans_by_attempt,
)
from agl_stream.types import Span

from tests.agl_stream.adapter.spans import SpanBuilder


def _tokens(triplets):  # type: ignore[no-untyped-def]
    return [(t.prompt_token_ids, t.response_token_ids, t.reward) for t in triplets]


def nested_agents() -> SpanBuilder:
    """main agent -> write agent (llm 1) -> check agent (llm 2, with a nested retry llm 3); final reward."""
    b = SpanBuilder()
    main = b.agent("main", 0.0, 10.0)
    write = b.agent("write", 1.0, 4.0, main)
    b.llm(1.5, 3.5, write, prompt=[1, 2], response=[3, 4], response_id="r1")
    check = b.agent("check", 5.0, 8.0, main)
    b.llm(5.5, 7.5, check, prompt=[5, 6], response=[7], response_id="r2")
    b.reward(1.0, 9.0, main)
    return b


def test_nested_agents_all_calls_with_their_agent_names() -> None:
    triplets = TracerTraceToTriplet().adapt(nested_agents().spans)
    assert _tokens(triplets) == [([1, 2], [3, 4], None), ([5, 6], [7], 1.0)]
    assert [t.metadata["agent_name"] for t in triplets] == ["write", "check"]
    assert [t.metadata["response_id"] for t in triplets] == ["r1", "r2"]


def test_agent_match_keeps_only_calls_under_matching_agents() -> None:
    spans = nested_agents().spans
    only_write = TracerTraceToTriplet(agent_match="write").adapt(spans)
    assert _tokens(only_write) == [([1, 2], [3, 4], 1.0)]  # the final reward goes to the last kept triplet
    assert only_write[0].metadata["agent_name"] == "write"
    both = TracerTraceToTriplet(agent_match="write|check").adapt(spans)
    assert len(both) == 2
    # upstream: an agent span that does not match ends the matching subtree below it, so the
    # calls inside write/check are not main's (golden corpus: agentops_nested_agents, "^main$")
    assert TracerTraceToTriplet(agent_match="^main$").adapt(spans) == []
    assert TracerTraceToTriplet(agent_match="nobody").adapt(spans) == []
    # without agent_match, calls outside any agent span are named "*" as upstream does
    b = SpanBuilder()
    b.llm(0.0, 1.0, prompt=[1], response=[2])
    assert [t.metadata["agent_name"] for t in TracerTraceToTriplet().adapt(b.spans)] == ["*"]


def test_reward_mid_rollout_attaches_to_the_call_before_it() -> None:
    b = SpanBuilder()
    root = b.agent("solver", 0.0, 10.0)
    b.llm(1.0, 2.0, root, prompt=[1], response=[2])
    b.reward(0.25, 2.5, root)
    b.llm(3.0, 4.0, root, prompt=[3], response=[4])
    b.llm(5.0, 6.0, root, prompt=[5], response=[6])
    b.reward(1.0, 7.0, root)
    triplets = TracerTraceToTriplet().adapt(b.spans)
    assert [t.reward for t in triplets] == [0.25, None, 1.0]
    assert find_final_reward(b.spans) == 1.0


def test_a_later_reward_goes_to_the_latest_call_still_without_one() -> None:
    b = SpanBuilder()
    root = b.agent("solver", 0.0, 10.0)
    b.llm(1.0, 2.0, root, prompt=[1], response=[2])
    b.llm(3.0, 4.0, root, prompt=[3], response=[4])
    b.reward(0.5, 4.5, root)
    b.reward(0.7, 5.0, root)  # the last call already has 0.5: upstream gives 0.7 to the call before it
    triplets = TracerTraceToTriplet().adapt(b.spans)
    assert [t.reward for t in triplets] == [0.7, 0.5]  # and never copies the final reward onto the last call
    assert find_final_reward(b.spans) == 0.7


def first_sibling_case() -> SpanBuilder:
    """Calls inside agents A and B; intermediate reward r1 is a sibling of A (not of the call)."""
    b = SpanBuilder()
    root = b.agent("main", 0.0, 20.0)
    a = b.agent("A", 1.0, 5.0, root)
    b.llm(2.0, 3.0, a, prompt=[1], response=[2])
    b.reward(0.3, 6.0, root)
    bb = b.agent("B", 7.0, 12.0, root)
    b.llm(8.0, 9.0, bb, prompt=[3], response=[4])
    b.llm(9.5, 10.0, bb, prompt=[5], response=[6])
    b.reward(0.9, 10.5, bb)  # sibling of the calls in B
    b.reward(1.0, 15.0, root)  # final reward
    return b


def test_first_occurrence_vs_first_sibling() -> None:
    spans = first_sibling_case().spans
    occurrence = TracerTraceToTriplet(reward_match=RewardMatchPolicy.FIRST_OCCURRENCE).adapt(spans)
    sibling = TracerTraceToTriplet(reward_match=RewardMatchPolicy.FIRST_SIBLING).adapt(spans)
    # chronological: r1 -> call in A; 0.9 -> last call in B; the final 1.0 -> the latest call left, B's first
    assert [t.reward for t in occurrence] == [0.3, 1.0, 0.9]
    # siblings only: r1 and the final reward have no earlier call among their siblings -> unmatched
    assert [t.reward for t in sibling] == [None, None, 0.9]
    tree = TraceTree.from_spans(spans)
    calls = tree.find_llm_calls(llm_call_match=r"openai\.chat\.completion", agent_match=None)
    sib = tree.match_rewards(RewardMatchPolicy.FIRST_SIBLING, calls)
    assert list(sib.values()) == [0.9] and sib == {calls[2][0].id: 0.9}


def test_reward_emitted_while_a_call_is_still_running_is_not_matched_to_it() -> None:
    b = SpanBuilder()
    root = b.agent("main", 0.0, 10.0)
    b.llm(1.0, 5.0, root, prompt=[1], response=[2])
    b.reward(0.4, 3.0, root)  # during the call
    tree = TraceTree.from_spans(b.spans)
    calls = tree.find_llm_calls(llm_call_match=r"openai\.chat\.completion", agent_match=None)
    assert tree.match_rewards(RewardMatchPolicy.FIRST_OCCURRENCE, calls) == {}


def test_nested_llm_calls_are_deduplicated() -> None:
    b = SpanBuilder()
    root = b.agent("main", 0.0, 10.0)
    outer = b.llm(1.0, 4.0, root, prompt=[1, 2], response=[3])
    b.llm(1.5, 3.5, outer, prompt=[1, 2], response=[3])  # same call instrumented twice (e.g. litellm + openai)
    b.llm(5.0, 6.0, root, prompt=[7], response=[8], response_id="same")
    b.llm(6.5, 7.0, root, prompt=[7], response=[8], response_id="same")  # reported twice with one response id
    deduped = TracerTraceToTriplet().adapt(b.spans)
    assert _tokens(deduped) == [([1, 2], [3], None), ([7], [8], None)]
    # without dedup the nested id-less call counts, but a response id seen before still does not (upstream)
    assert len(TracerTraceToTriplet(dedup_llm_call=False).adapt(b.spans)) == 3


def test_llm_calls_inside_a_reward_span_are_excluded() -> None:
    b = SpanBuilder()
    root = b.agent("main", 0.0, 10.0)
    b.llm(1.0, 2.0, root, prompt=[1], response=[2])
    judge = b.reward(0.8, 3.0, root)
    b.llm(3.0, 3.0, judge, prompt=[99], response=[98])  # LLM-as-judge inside the reward computation
    assert _tokens(TracerTraceToTriplet().adapt(b.spans)) == [([1], [2], 0.8)]
    assert len(TracerTraceToTriplet(exclude_llm_call_in_reward=False).adapt(b.spans)) == 2


def test_several_roots_get_a_virtual_root_and_repair_moves_orphans_into_their_agent() -> None:
    b = SpanBuilder()
    write = b.agent("write", 0.0, 5.0)
    # the LLM span lost its parent link and landed in another trace
    b.llm(1.0, 2.0, None, prompt=[1], response=[2], trace_id="b" * 32)
    b.reward(1.0, 6.0, None)
    tree = TraceTree.from_spans(b.spans)
    assert tree.span.name == semconv.AGL_VIRTUAL and len(tree.children) == 3
    tree.repair_hierarchy()
    assert tree.names_tuple() == (
        semconv.AGL_VIRTUAL,
        [("agent write [write]", [(semconv.LLM_CALL_SPAN_NAME, [])]), (semconv.AGL_ANNOTATION, [])],
    )
    assert _tokens(TracerTraceToTriplet(agent_match="write").adapt(b.spans)) == [([1], [2], 1.0)]
    assert TracerTraceToTriplet(agent_match="write", repair_hierarchy=False).adapt(b.spans) == []


def test_token_id_lookup_order_logprobs_and_policy_version() -> None:
    out = "agentlightning.operation.output"
    b = SpanBuilder()
    root = b.agent("main", 0.0, 10.0)
    b.llm(
        1.0, 2.0, root,
        extra={
            f"{out}.prompt_token_ids": "[10, 11]",  # stringified by a tracer: still read
            f"{out}.choices.0.token_ids": [12, 13],
            f"{out}.id": "chatcmpl-1",
            semconv.RESPONSE_LOGPROBS: [-0.5, -0.25],
            semconv.POLICY_VERSION: 7,
        },
    )  # fmt: skip
    b.llm(
        3.0, 4.0, root,
        prompt=[20], response=[21],
        extra={f"{out}.prompt_token_ids": [99], f"{out}.response_token_ids.0": [98], semconv.POLICY_VERSION: "8"},
    )  # fmt: skip
    b.llm(5.0, 6.0, root, extra={f"{out}.choices.0.provider_specific_fields.token_ids": [31]}, prompt=[30])
    first, second, third = TracerTraceToTriplet().adapt(b.spans)
    assert (first.prompt_token_ids, first.response_token_ids) == ([10, 11], [12, 13])
    assert first.response_logprobs == [-0.5, -0.25] and first.policy_version == 7
    assert first.metadata["response_id"] == "chatcmpl-1"
    assert (second.prompt_token_ids, second.response_token_ids, second.policy_version) == ([20], [21], 8)
    assert second.response_logprobs is None
    assert (third.prompt_token_ids, third.response_token_ids) == ([30], [31])


def test_llm_call_match_is_a_regex_on_span_names() -> None:
    b = SpanBuilder()
    b.span("my.llm.call", 0.0, 1.0, attributes={semconv.PROMPT_TOKEN_IDS: [1], semconv.RESPONSE_TOKEN_IDS: [2]})
    assert TracerTraceToTriplet().adapt(b.spans) == []
    assert _tokens(TracerTraceToTriplet(llm_call_match=r"llm\.call").adapt(b.spans)) == [([1], [2], None)]


def test_sequence_ids_order_calls_not_arrival_order_and_duplicates_count_once() -> None:
    spans = nested_agents().spans
    shuffled = list(reversed(spans)) + [spans[2]]  # delivered out of order, one span twice
    assert _tokens(TracerTraceToTriplet().adapt(shuffled)) == _tokens(TracerTraceToTriplet().adapt(spans))


def test_grouping_by_attempt_not_trace_and_mixed_attempts_rejected() -> None:
    a = SpanBuilder(attempt_id="at-0000000a")
    a.llm(0.0, 1.0, None, prompt=[1], response=[2], trace_id="1" * 32)
    a.llm(2.0, 3.0, None, prompt=[3], response=[4], trace_id="2" * 32)
    other = SpanBuilder(attempt_id="at-0000000b")
    other.llm(0.0, 1.0, None, prompt=[5], response=[6])
    groups = group_spans_by_attempt(other.spans + a.spans)
    assert sorted(groups) == [("ro-000000000001", "at-0000000a"), ("ro-000000000001", "at-0000000b")]
    assert len(TracerTraceToTriplet().adapt(groups[("ro-000000000001", "at-0000000a")])) == 2
    with pytest.raises(ValueError, match="one attempt"):
        TracerTraceToTriplet().adapt(a.spans + other.spans)
    assert TracerTraceToTriplet().adapt([]) == []
    with pytest.raises(ValueError):
        TraceTree.from_spans([])


def test_transition_view_of_a_triplet() -> None:
    triplet = TracerTraceToTriplet().adapt(nested_agents().spans)[1]
    assert Transition.from_triplet(triplet) == Transition([5, 6], [7], "r2", "check", 1.0)


def test_spans_survive_a_json_round_trip_unchanged_for_the_adapter() -> None:
    spans = [Span.model_validate_json(s.model_dump_json()) for s in first_sibling_case().spans]
    assert [t.reward for t in TracerTraceToTriplet().adapt(spans)] == [0.3, 1.0, 0.9]


def test_response_ids_dedup_only_when_they_are_text() -> None:
    b = SpanBuilder()
    root = b.agent("main", 0.0, 10.0)
    b.llm(1.0, 2.0, root, prompt=[1], response=[2], response_id="")  # no id from the server: not a duplicate key
    b.llm(3.0, 4.0, root, prompt=[3], response=[4], response_id="")
    b.llm(5.0, 6.0, root, prompt=[5], response=[6], extra={semconv.GEN_AI_RESPONSE_ID: 7})  # not text: ignored
    b.llm(7.0, 8.0, root, prompt=[7], response=[8], extra={semconv.GEN_AI_RESPONSE_ID: 7})
    triplets = TracerTraceToTriplet().adapt(b.spans)
    assert [t.prompt_token_ids for t in triplets] == [[1], [3], [5], [7]]
    assert all(t.metadata["response_id"] is None for t in triplets)
