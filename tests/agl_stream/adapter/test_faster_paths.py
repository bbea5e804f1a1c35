"""The adapter's cheaper paths answer exactly as the straightforward definitions they replaced.

Each reference below is the previous implementation, kept here as the oracle: random span sets with
equal times (ties), missing times and nested envelopes exercise the orders and the re-parenting.
"""

from __future__ import annotations

import math
import random
from typing import Any, Optional

import pytest

from agl_stream.adapter.attributes import with_prefix
from agl_stream.adapter.rewards import (
    find_final_reward, find_final_reward_dimensions, final_reward, store_order, store_order_key,
)  # fmt: skip
from agl_stream.adapter.tree import TraceTree
from agl_stream.types import Span
from tests.agl_stream.adapter.golden.cases import golden_cases


def _reference_store_order(spans: list[Any]) -> list[Any]:
    items = list(spans)
    timed = all(store_order_key(s)[0] != -math.inf for s in items)
    return sorted(items, key=store_order_key) if timed else items


def _reference_repair(tree: TraceTree) -> None:
    if len(tree.children) == 1:
        _reference_repair(tree.children[0])
        return
    for node in list(tree.children):
        if len(tree.children) == 1:
            break
        start, end = node.span.start_time, node.span.end_time
        if start is None or end is None:
            continue
        own = {id(n) for n in node.traverse()}
        best: Optional[TraceTree] = None
        best_slack = float("inf")
        for candidate in tree.traverse():
            if candidate is tree or id(candidate) in own:
                continue
            c_start, c_end = candidate.span.start_time, candidate.span.end_time
            if c_start is None or c_end is None or c_start > start or c_end < end:
                continue
            slack = (c_end - end) + (start - c_start)
            if 0 < slack < best_slack:
                best, best_slack = candidate, slack
        if best is not None:
            tree.children.remove(node)
            best.children.append(node)


def _random_spans(rng: random.Random) -> list[Span]:
    """Spans on a coarse time grid (many equal times), some without parents or times, some rewards."""
    spans: list[Span] = []
    for i in range(rng.randint(1, 14)):
        start = float(rng.randint(0, 6))
        end: Optional[float] = start + rng.randint(0, 6)
        if rng.random() < 0.1:
            end = None
        parent = rng.choice([None, None, *(s.span_id for s in spans)]) if spans else None
        attributes: dict[str, Any] = {"k": i}
        if rng.random() < 0.3:
            attributes.update({"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": rng.random()})
            if rng.random() < 0.5:
                attributes.update({"agentlightning.reward.1.name": "correct", "agentlightning.reward.1.value": 1.0})
        spans.append(Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=rng.randint(0, 3),
                          trace_id="a" * 32, span_id=f"{i:016x}", parent_id=parent, name="n",
                          start_time=None if rng.random() < 0.05 else start, end_time=end, attributes=attributes))  # fmt: skip
    return spans


def _shape(tree: TraceTree) -> tuple[str, list[Any]]:
    return (tree.id, [_shape(child) for child in tree.children])


@pytest.mark.parametrize("seed", range(300))
def test_store_order_repair_and_final_reward_match_their_references(seed: int) -> None:
    spans = _random_spans(random.Random(seed))
    assert [id(s) for s in store_order(spans)] == [id(s) for s in _reference_store_order(spans)]
    ours, reference = TraceTree.from_spans(spans), TraceTree.from_spans(spans)
    ours.repair_hierarchy()
    _reference_repair(reference)
    assert _shape(ours) == _shape(reference)
    assert final_reward(spans) == (find_final_reward(spans), find_final_reward_dimensions(spans))


def test_the_golden_corpus_orders_and_repairs_as_the_references_do() -> None:
    for case in golden_cases():
        spans = case.spans
        assert [id(s) for s in store_order(spans)] == [id(s) for s in _reference_store_order(spans)], case.name
        ours, reference = TraceTree.from_spans(spans), TraceTree.from_spans(spans)
        ours.repair_hierarchy()
        _reference_repair(reference)
        assert _shape(ours) == _shape(reference), case.name


def test_with_prefix_keeps_the_keys_below_the_prefix_in_order() -> None:
    attrs = {"gen_ai.prompt.0.role": "user", "gen_ai.prompt": "x", "gen_ai.promptx.a": 1, "gen_ai.prompt.1.content": "hi",
             "other": 2}  # fmt: skip
    assert list(with_prefix(attrs, "gen_ai.prompt").items()) == [("0.role", "user"), ("1.content", "hi")]
    assert with_prefix(attrs, "missing") == {}
