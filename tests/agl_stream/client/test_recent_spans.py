"""The spans of recent rollouts in memory: the last copy of each span, filtered, sorted and paged as the ClickHouse
reader does; whole rollouts evicted oldest first; which rollouts it answers for."""

from __future__ import annotations

from typing import Optional

import pytest

from agl_stream.client.recent_spans import RecentSpans, answer
from agl_stream.client.span_reader import SpanQuery
from agl_stream.serialization import encode
from agl_stream.types import Span


def span(seq: int, name: str, *, attempt: str = "at-1", span_id: Optional[str] = None, parent: Optional[str] = None,
         start: Optional[float] = 10.0, end: Optional[float] = 11.0, rollout: str = "ro-1") -> Span:  # fmt: skip
    return Span(rollout_id=rollout, attempt_id=attempt, sequence_id=seq, trace_id="t" * 32, span_id=span_id or f"{seq:016x}",
                parent_id=parent, name=name, start_time=start, end_time=end)  # fmt: skip


def names(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.name for s in result]


def test_the_last_copy_of_a_span_is_the_one_answered() -> None:
    held = RecentSpans(began_at=0.0)
    first = span(1, "first")
    for value in (first, span(2, "second"), first.model_copy(update={"name": "first, again"})):
        held.add("ro-1", encode(value), timestamp=100.0)
    result = held.read(SpanQuery("ro-1"))
    assert names(result) == ["first, again", "second"] and result.total == 2
    assert held.read(SpanQuery("ro-2")).total == 0


def test_filters_sorting_and_pages_as_the_clickhouse_reader() -> None:
    spans = [span(1, "alpha", parent=None), span(2, "beta", parent="p1"), span(3, "alphabet", parent="p1", attempt="at-2"),
             span(4, "gamma", parent="p2", start=None, end=None)]  # fmt: skip
    assert names(answer(spans, SpanQuery("ro-1"))) == ["alpha", "beta", "alphabet", "gamma"]  # sequence order by default
    assert names(answer(spans, SpanQuery("ro-1", attempt_id="at-2"))) == ["alphabet"]
    assert names(answer(spans, SpanQuery("ro-1", contains={"name": "alpha"}))) == ["alpha", "alphabet"]
    assert names(answer(spans, SpanQuery("ro-1", exact={"parent_id": "p1"}, contains={"name": "bet"}))) == ["beta", "alphabet"]
    assert names(answer(spans, SpanQuery("ro-1", exact={"parent_id": ""}))) == ["alpha"]  # no parent: the empty id
    either = SpanQuery("ro-1", exact={"name": "gamma"}, contains={"name": "alpha"}, filter_logic="or")
    assert names(answer(spans, either)) == ["alpha", "alphabet", "gamma"]
    assert names(answer(spans, SpanQuery("ro-1", sort_by="name", sort_order="desc"))) == ["gamma", "beta", "alphabet", "alpha"]
    # a missing time sorts last (upstream's rule); ties keep sequence order whichever the direction
    assert names(answer(spans, SpanQuery("ro-1", sort_by="end_time")))[-1] == "gamma"
    assert names(answer(spans, SpanQuery("ro-1", sort_by="start_time", sort_order="desc"))) == ["gamma", "alpha", "beta", "alphabet"]
    page = answer(spans, SpanQuery("ro-1", contains={"name": "a"}, sort_by="name", sort_order="desc", limit=1, offset=1))
    assert names(page) == ["beta"] and (page.total, page.limit, page.offset) == (4, 1, 1)
    assert answer(spans, SpanQuery("ro-1", limit=2, offset=3)).total == 4 and names(answer(spans, SpanQuery("ro-1", offset=3))) == ["gamma"]


def test_whole_rollouts_are_evicted_oldest_first_and_only_later_ones_are_answered_for() -> None:
    raw = encode(span(1, "x"))
    held = RecentSpans(began_at=1000.0, max_bytes=3 * len(raw), margin=30.0)
    assert not held.covers(None) and not held.covers(1020.0) and held.covers(1031.0)  # began at 1000, margin 30
    for i, first_seen in enumerate((1100.0, 1200.0, 1300.0)):
        held.add(f"ro-{i}", raw, timestamp=first_seen)
    assert held.rollouts == 3 and held.evicted_rollouts == 0
    held.add("ro-1", raw, timestamp=1400.0)  # over the bound: the oldest rollout (first seen 1100) goes, whole
    assert held.rollouts == 2 and held.evicted_rollouts == 1 and held.bytes == 3 * len(raw)
    assert held.read(SpanQuery("ro-0")).total == 0
    assert not held.covers(1120.0) and held.covers(1131.0)  # enqueued after the evicted one's first span (+ margin)
    assert held.read(SpanQuery("ro-1")).total == 1  # its two copies of one span: one span


def test_too_many_rollouts_evict_too_and_a_gap_drops_everything() -> None:
    held = RecentSpans(began_at=0.0, max_rollouts=2, margin=0.0)
    for i in range(3):
        held.add(f"ro-{i}", encode(span(1, "x", rollout=f"ro-{i}")), timestamp=float(i + 1))
    assert held.rollouts == 2 and not held.covers(1.0) and held.covers(1.5)
    held.forget_all(now=50.0)
    assert held.rollouts == 0 and held.bytes == 0 and not held.covers(40.0) and held.covers(51.0)


def test_a_record_that_does_not_decode_is_left_out_and_counted() -> None:
    held = RecentSpans(began_at=0.0)
    held.add("ro-1", b"not an envelope", timestamp=1.0)
    held.add("ro-1", encode(span(1, "ok")), timestamp=1.0)
    assert names(held.read(SpanQuery("ro-1"))) == ["ok"] and held.undecodable == 1


@pytest.mark.parametrize("sort_by", ["sequence_id", "start_time", "end_time", "name", "trace_id", "span_id", "parent_id",
                                     "rollout_id", "attempt_id"])  # fmt: skip
def test_every_sort_field_of_the_reader_is_known(sort_by: str) -> None:
    spans = [span(2, "b", parent="p"), span(1, "a")]
    assert len(answer(spans, SpanQuery("ro-1", sort_by=sort_by))) == 2
