"""Reward readers and attribute unflattening: upstream's formats and precedence, and edge cases the
golden corpus does not record (malformed entries, payloads upstream would crash on)."""

from __future__ import annotations

import json

from agl_stream import emitter
from agl_stream.adapter.attributes import group_indexed, unflatten
from agl_stream.adapter.rewards import find_final_reward, find_reward_spans, reward_dimensions, reward_value
from agl_stream.semconv import AGL_ANNOTATION

from tests.agl_stream.adapter.spans import SpanBuilder

V3 = {"agentlightning.reward.0.name": "acc", "agentlightning.reward.0.value": 0.5,
      "agentlightning.reward.1.name": "fmt", "agentlightning.reward.1.value": 1}  # fmt: skip


def test_v3_rewards_on_any_span_name_primary_first() -> None:
    assert reward_dimensions(V3) == [("acc", 0.5), ("fmt", 1.0)]
    assert reward_value("whatever.span", V3) == 0.5


def test_malformed_v3_entries_are_not_rewards() -> None:
    gap = {"agentlightning.reward.0.name": "a", "agentlightning.reward.0.value": 1.0,
           "agentlightning.reward.2.value": 2.0}  # fmt: skip
    assert reward_dimensions(gap) == []  # indices must be 0..n-1 (upstream raises a validation error)
    assert reward_dimensions({"agentlightning.reward.0.value": 1.0}) == []  # a reward needs its name
    assert reward_dimensions({"agentlightning.reward.0.name": "a", "agentlightning.reward.0.value": "high"}) == []


def test_agentops_payloads_and_the_v02_annotation() -> None:
    payload = json.dumps({"type": "reward", "value": 0.75})
    assert reward_value("judge.task", {"agentops.task.output": payload}) == 0.75
    assert reward_value("judge.task", {"agentops.entity.output": {"type": "reward", "value": 0.25}}) == 0.25
    # a null reward makes a non-reward span, and stops the search there (as upstream)
    null = {"agentops.task.output": '{"type": "reward", "value": null}', "reward": 1.0}
    assert reward_value(AGL_ANNOTATION, null) is None
    # task outputs that are JSON but not an object: not a reward (upstream would crash on .get)
    assert reward_value("tool.task", {"agentops.task.output": "30"}) is None
    assert reward_value("tool.task", {"agentops.task.output": "answer 1"}) is None
    # v0.2: a ``reward`` attribute counts on annotation spans only
    assert reward_value(AGL_ANNOTATION, {"reward": 0.3}) == 0.3
    assert reward_value("agentlightning.reward", {"reward": 0.3}) is None
    # v0.3 entries win over the older formats
    assert reward_value(AGL_ANNOTATION, {**V3, "reward": 0.3}) == 0.5


def test_final_reward_is_the_reward_that_ended_last_whatever_the_arrival_order() -> None:
    b = SpanBuilder()
    b.reward(0.2, 1.0)
    b.reward(0.9, 3.0)
    b.reward(0.4, 2.0)
    shuffled = [b.spans[1], b.spans[2], b.spans[0]]
    for spans in (b.spans, shuffled, list(reversed(b.spans))):
        assert find_final_reward(spans) == 0.9
        assert [reward_value(s.name, s.attributes) for s in find_reward_spans(spans)] == [0.2, 0.4, 0.9]
        assert emitter.find_final_reward(spans) == 0.9
        assert [r.model_dump() for r in emitter.get_rewards_from_span(find_reward_spans(spans)[0])] == [
            {"name": "primary", "value": 0.2}
        ]
    assert find_final_reward([]) is None


def test_unflatten_makes_lists_only_of_complete_indices() -> None:
    assert unflatten({"a.b": 1, "a.c.0": 2, "a.c.1": 3}) == {"a": {"b": 1, "c": [2, 3]}}
    assert unflatten({"x.0": "a", "x.2": "c"}) == {"x": {"0": "a", "2": "c"}}
    assert unflatten({"a": 1, "a.b": 2}) == {"a": {"b": 2}}  # where paths collide, the later key wins


def test_group_indexed_orders_by_index_and_closes_gaps() -> None:
    attributes = {"p.2.role": "user", "p.0.role": "system", "p.0.content": "s", "p.2.tool_calls.0.id": "c1", "q": 1}
    assert group_indexed(attributes, "p") == [
        {"role": "system", "content": "s"},
        {"role": "user", "tool_calls": [{"id": "c1"}]},
    ]
    grouped = group_indexed({"r.model": "m", "r.functions.0.name": "f"}, "r")
    assert grouped == {"model": "m", "functions": [{"name": "f"}]}
    assert group_indexed({}, "p") == {}
