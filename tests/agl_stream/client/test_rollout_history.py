"""Rollouts the view forgot, read back from ClickHouse's rollouts and attempts tables; and a store client that
answers for them."""

from __future__ import annotations

import asyncio
import time

import pytest

from agl_stream.client import StoreClient
from agl_stream.client.rollout_history import WATCHDOG_CLOSED, ClickHouseRolloutHistory
from agl_stream.config import Settings
from agl_stream.types import Attempt, AttemptedRollout, AttemptEvent, Rollout, RolloutConfig, RolloutSnapshot, Span
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.clickhouse.columns import ColumnBatch
from agl_stream_processors.clickhouse.rows import ATTEMPT_SCHEMA, ROLLOUT_SCHEMA, attempt_rows, rollout_rows
from tests.agl_stream.client.pipeline import store_with_pipeline
from tests.processors.clickhouse.store import ch, store_dsn  # noqa: F401  (fixtures)

T0 = 1_790_000_000.0


def _store(ch: ClickHouse, snapshots: list[RolloutSnapshot], events: list[AttemptEvent]) -> None:  # noqa: F811
    ch.insert_arrow("rollouts", ColumnBatch(ROLLOUT_SCHEMA, [r for s in snapshots for r in rollout_rows(s)]).to_arrow())
    ch.insert_arrow("attempts", ColumnBatch(ATTEMPT_SCHEMA, [r for e in events for r in attempt_rows(e)]).to_arrow())


def _event(kind: str, rid: str, aid: str, seq: int, at: float, **fields: object) -> AttemptEvent:
    return AttemptEvent(kind=kind, rollout_id=rid, attempt_id=aid, attempt_sequence_id=seq, timestamp=at, **fields)  # type: ignore[arg-type]


def _history_fixture(ch: ClickHouse) -> tuple[AttemptedRollout, Rollout]:  # noqa: F811
    config = RolloutConfig(max_attempts=3, retry_condition=["unresponsive"])
    retried = Rollout(rollout_id="ro-000000000h01", input={"q": "2+2", "a": 4}, start_time=T0, end_time=T0 + 30,
                      mode="train", resources_id="rs-1", status="succeeded", config=config, metadata={"tag": "x"})  # fmt: skip
    second = Attempt(rollout_id=retried.rollout_id, attempt_id="at-0000h002", sequence_id=2, start_time=T0 + 20,
                     end_time=T0 + 30, status="succeeded", worker_id="w-2")  # fmt: skip
    queued = Rollout(rollout_id="ro-000000000h02", input="plain text", start_time=T0 + 1, status="queuing")
    _store(ch, [RolloutSnapshot(rollout=retried, attempt=second, attempts=2, updated_at=T0 + 30),
                RolloutSnapshot(rollout=queued, attempts=0, updated_at=T0 + 1)],
           [_event("started", retried.rollout_id, "at-0000h001", 1, T0 + 1, worker_id="w-1"),
            _event("heartbeat", retried.rollout_id, "at-0000h001", 1, T0 + 5, worker_id="w-1"),
            _event("started", retried.rollout_id, "at-0000h002", 2, T0 + 20, worker_id="w-2"),
            _event("finished", retried.rollout_id, "at-0000h002", 2, T0 + 30, worker_id="w-2", status="succeeded",
                   span_count=3, metadata={"final_reward": 1.0})])  # fmt: skip
    return AttemptedRollout(**retried.model_dump(), attempt=second), queued


async def test_rollouts_and_attempts_read_back_from_the_tables(ch: ClickHouse, store_dsn: str) -> None:  # noqa: F811
    retried, queued = _history_fixture(ch)
    history = ClickHouseRolloutHistory(store_dsn, ch.database)
    try:
        found = {r.rollout_id: r for r in await history.rollouts([retried.rollout_id, queued.rollout_id, "ro-nope"])}
        assert set(found) == {retried.rollout_id, queued.rollout_id}
        back = found[retried.rollout_id]
        assert isinstance(back, AttemptedRollout)
        assert back.model_dump(exclude={"attempt"}) == retried.model_dump(exclude={"attempt"})  # input, config, times
        assert (back.attempt.attempt_id, back.attempt.sequence_id, back.attempt.status, back.attempt.worker_id,
                back.attempt.start_time, back.attempt.end_time) == ("at-0000h002", 2, "succeeded", "w-2", T0 + 20, T0 + 30)  # fmt: skip
        assert back.attempt.metadata == {"final_reward": 1.0}
        assert not isinstance(found[queued.rollout_id], AttemptedRollout) and found[queued.rollout_id].input == "plain text"

        attempts = await history.attempts(retried.rollout_id)
        assert [(a.attempt_id, a.status) for a in attempts] == [("at-0000h001", WATCHDOG_CLOSED), ("at-0000h002", "succeeded")]
        assert (attempts[0].start_time, attempts[0].end_time, attempts[0].last_heartbeat_time) == (T0 + 1, None, T0 + 5)

        both = await history.matching(statuses=["succeeded"], rollout_ids=None, id_contains="h02", filter_logic="or")
        assert sorted(r.rollout_id for r in both) == [retried.rollout_id, queued.rollout_id]
        neither = await history.matching(statuses=["succeeded"], rollout_ids=[queued.rollout_id], id_contains=None,
                                         filter_logic="and")  # fmt: skip
        assert neither == []
        assert await history.matching(statuses=[], rollout_ids=None, id_contains=None, filter_logic="and") == []
    finally:
        await history.close()


class _FakeHistory:
    """The history a store client consults, as a list (the client's side of the seam only)."""

    def __init__(self, rollouts: list[Rollout]) -> None:
        self.stored = {r.rollout_id: r for r in rollouts}
        self.calls = 0

    async def rollouts(self, ids):  # type: ignore[no-untyped-def]
        self.calls += 1
        return [self.stored[i] for i in ids if i in self.stored]

    async def matching(self, *, statuses, rollout_ids, id_contains, filter_logic):  # type: ignore[no-untyped-def]
        self.calls += 1
        return [r for r in self.stored.values() if statuses is None or r.status in statuses]

    async def attempts(self, rollout_id):  # type: ignore[no-untyped-def]
        self.calls += 1
        r = self.stored.get(rollout_id)
        return [r.attempt] if isinstance(r, AttemptedRollout) else []

    async def close(self) -> None:
        pass


@pytest.mark.integration
async def test_a_store_client_answers_for_rollouts_its_view_forgot(topics: Settings) -> None:
    """Reads of a forgotten rollout go to the history; reads of held ones never do."""
    old = AttemptedRollout(rollout_id="ro-000000000old", input=1, status="succeeded",
                           attempt=Attempt(rollout_id="ro-000000000old", attempt_id="at-00000old", status="succeeded"))  # fmt: skip
    history = _FakeHistory([old])
    settings = topics.model_copy(update={"store_recent_rollouts": 1})
    async with StoreClient(settings, rollout_history=history) as store:  # type: ignore[arg-type]
        live = await store.enqueue_rollout(input=2)
        assert await store.get_rollout_by_id(old.rollout_id) is None and history.calls == 0  # nothing forgotten yet
        for n in range(2):  # two finished rollouts through the view: one of them is forgotten
            rid = f"ro-00000000fin{n}"
            store.view.apply(rid, RolloutSnapshot(rollout=Rollout(rollout_id=rid, status="succeeded"), updated_at=T0 + n))
        assert store.view.evicted == 1
        assert await store.get_rollout_by_id(old.rollout_id) == old
        assert (await store.get_latest_attempt(old.rollout_id)) == old.attempt
        assert [a.attempt_id for a in await store.query_attempts(old.rollout_id)] == ["at-00000old"]
        done = await store.wait_for_rollouts(rollout_ids=[old.rollout_id], timeout=0)
        assert [r.rollout_id for r in done] == [old.rollout_id] and not isinstance(done[0], AttemptedRollout)
        page = await store.query_rollouts(status_in=["succeeded"], sort_by="rollout_id")
        assert [r.rollout_id for r in page] == [old.rollout_id, "ro-00000000fin1"]  # the held one and the forgotten one
        calls = history.calls
        assert (await store.get_rollout_by_id(live.rollout_id)).rollout_id == live.rollout_id  # type: ignore[union-attr]
        assert [r.rollout_id for r in await store.query_rollouts(rollout_id_in=[live.rollout_id])] == [live.rollout_id]
        assert history.calls == calls  # every id asked for is held: no history query


@pytest.mark.integration
async def test_forgotten_rollouts_read_back_through_the_real_pipeline(topics: Settings) -> None:
    """Three rollouts run by hand through the state machine and the sinks, a view that holds one finished rollout:
    the two it forgot read back from ClickHouse, spans and all."""
    settings = topics.model_copy(update={"store_recent_rollouts": 1})
    history = ClickHouseRolloutHistory(settings.effective_clickhouse_dsn)
    try:
        await _run_three_and_read_back(settings, history)
    finally:
        await history.close()  # the embedded engine is one per process: the next test opens another directory


async def _run_three_and_read_back(settings: Settings, history: ClickHouseRolloutHistory) -> None:
    async with store_with_pipeline(settings, rollout_history=history) as store:
        enqueued = [await store.enqueue_rollout(input={"n": n}) for n in range(3)]
        ran = 0
        deadline = time.monotonic() + 60
        while ran < 3 and time.monotonic() < deadline:
            task = await store.dequeue_rollout(worker_id="hand")
            if task is None:
                continue
            span = Span(rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id, sequence_id=1, trace_id="d" * 32,
                        span_id="0000000000000001", name="work", start_time=time.time(), end_time=time.time())  # fmt: skip
            await store.add_span(span)
            await store.update_attempt(task.rollout_id, task.attempt.attempt_id, status="succeeded")
            ran += 1
        assert ran == 3
        for _ in range(150):  # a success is answered at the broker's acknowledgement: the view forgets on the snapshots
            if store.view.evicted == 2:
                break
            await asyncio.sleep(0.2)
        assert store.view.evicted == 2 and store.view.finished_held == 1
        forgotten = [r.rollout_id for r in enqueued if not store.view.knows(r.rollout_id)]
        assert len(forgotten) == 2
        for _ in range(150):  # the rollouts and attempts sinks write within their batch intervals
            back = [await store.get_rollout_by_id(rid) for rid in forgotten]
            attempts = [await store.query_attempts(rid) for rid in forgotten]
            if all(r is not None and r.status == "succeeded" for r in back) and all(len(a) == 1 for a in attempts):
                break
            await asyncio.sleep(0.2)
        assert all(isinstance(r, AttemptedRollout) and r.status == "succeeded" and r.attempt.status == "succeeded"
                   for r in back), back  # fmt: skip
        assert sorted(r.input["n"] for r in back) == sorted(r.input["n"] for r in enqueued if r.rollout_id in forgotten)  # type: ignore[index, union-attr]
        spans = await store.query_spans(forgotten[0], "latest")  # waits for the span count its finished event gave
        assert [s.name for s in spans] == ["work"]
        page = await store.query_rollouts(status_in=["succeeded"])
        assert sorted(r.rollout_id for r in page) == sorted(r.rollout_id for r in enqueued)
        assert [a.status for a in await store.query_attempts(forgotten[1])] == ["succeeded"]
