"""Replay's lookups by caller-supplied ids with 30,000 of them (most not stored), on the engine and through the SQL door.

``agl-stream replay`` reads through the sinks' SQL door while they run: there, one query carrying every
rollout id or (rollout, attempt) key as an ``Array`` parameter failed (the parameter went into a
multipart form the door does not read; a server caps such a field at 128 KiB). The lookups now go in
bounded chunks and merge, with the same answers: ordering and ``--limit`` across chunks included.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from agl_stream.adapter import TracerTraceToTriplet
from agl_stream.client.sql_ids import MAX_IDS_PER_QUERY
from agl_stream_processors.clickhouse import ClickHouse, connect
from agl_stream_processors.replay import Selection, read_context, read_spans, replay, select_attempts
from tests.processors.clickhouse.store import ch, insert_records, make_snapshot, make_span, store_dsn  # noqa: F401
from tests.processors.clickhouse.through_door import door_dsn

pytestmark = pytest.mark.integration

MANY = 30_000
T0 = 1_800_000_000.0


def _stored(ch: ClickHouse) -> dict[str, float]:  # noqa: F811
    """Three rollouts of one attempt each, 3 spans apiece; rollout id -> its first span's start time.

    The rollout named first in the selection (first chunk) starts last, the last named (last chunk) first."""
    starts = {"ro-00000000aaa1": T0 + 30, "ro-00000000aaa2": T0 + 20, "ro-00000000aaa3": T0 + 10}
    spans = [make_span(rid, sequence_id=n, span_id=f"{i:08x}{n:08x}", start_time=start + n, end_time=start + n + 0.5)
             for i, (rid, start) in enumerate(starts.items()) for n in (3, 1, 2)]  # fmt: skip
    insert_records(ch, "spans", spans)
    insert_records(ch, "rollouts", [make_snapshot(r) for r in starts])
    return {rid: start + 1 for rid, start in starts.items()}


def _named(real: list[str]) -> list[str]:
    """30,000 unknown rollout ids with the real ones first, in the middle and last (three different chunks)."""
    unknown = [f"ro-{i:012x}" for i in range(MANY)]
    return [real[0], *unknown[: MANY // 2], real[1], *unknown[MANY // 2 :], real[2]]


def _check(reader: ClickHouse, starts: dict[str, float]) -> None:
    real = list(starts)
    named = _named(real)
    by_start = sorted(real, key=starts.__getitem__)
    selected = select_attempts(reader, Selection(tuple(named)))
    assert selected == [(r, "at-00000001") for r in by_start]  # earliest first span first, across chunks
    assert select_attempts(reader, Selection(tuple(named), limit=2)) == selected[:2]
    assert select_attempts(reader, Selection(tuple(named), since=starts[by_start[1]], limit=1)) == selected[1:2]

    keys = [(r, "at-00000001") for r in named]
    spans = read_spans(reader, keys)
    assert len(spans) == len(keys)
    assert {k: [s.sequence_id for s in v] for k, v in spans.items() if v} == {(r, "at-00000001"): [1, 2, 3] for r in real}

    context = read_context(reader, keys)
    assert len(context) == len(keys)  # one record per key asked for, stored or not
    for rid in real:
        ctx = context[(rid, "at-00000001")]
        assert (ctx["mode"], ctx["decision"], ctx["rollout_status"]) == ("train", "final", "succeeded"), ctx
    assert context[(named[1], "at-00000001")]["mode"] is None  # an unknown rollout

    trajectories = list(replay(reader, TracerTraceToTriplet(), label="many", selection=Selection(tuple(named))))
    assert [(t.rollout_id, t.span_count) for t in trajectories] == [(r, 3) for r in by_start]


@pytest.mark.parametrize("through", ["engine", "door"])
async def test_replay_lookups_with_30000_ids(ch: ClickHouse, through: str) -> None:  # noqa: F811
    if through == "door" and not ch.target.embedded:
        pytest.skip("the SQL door serves an embedded engine")
    assert MANY > 20 * MAX_IDS_PER_QUERY
    starts = _stored(ch)
    check: Callable[[ClickHouse], Any] = lambda reader: _check(reader, starts)  # noqa: E731
    if through == "door":
        async with door_dsn(ch) as dsn:
            reader = connect(dsn)
            try:
                await asyncio.to_thread(check, reader)
            finally:
                reader.close()
    else:
        await asyncio.to_thread(check, ch)
