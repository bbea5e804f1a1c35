"""The algorithm-side client against a real broker."""

from __future__ import annotations

import asyncio

import pytest

from agl_stream.client import EnqueueRolloutRequest, ResourceCache, StoreClient
from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.types import LLM, AttemptedRollout, PromptTemplate, RolloutConfig, RolloutSnapshot
from tests.agl_stream.runner.helpers import collect

pytestmark = pytest.mark.integration


async def test_enqueue_preassigns_first_attempt(topics: Settings) -> None:
    async with StoreClient(topics) as store:
        single = await store.enqueue_rollout({"q": 1}, mode="train", resources_id="rs-1",
                                             config=RolloutConfig(max_attempts=3, retry_condition=["failed"]),
                                             metadata={"group": "g1"})  # fmt: skip
        many = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i, mode="val") for i in range(3)]
                                                 + [{"input": "dict-form"}])  # fmt: skip
    assert single.status == "queuing" and single.rollout_id.startswith("ro-") and len(many) == 4
    tasks = await collect(topics, "tasks", AttemptedRollout, lambda t: len(t) >= 5)
    by_id = {t.rollout_id: t for t in tasks}
    first = by_id[single.rollout_id]
    assert first.attempt.sequence_id == 1 and first.attempt.attempt_id.startswith("at-")
    assert first.config.max_attempts == 3 and first.metadata == {"group": "g1"} and first.resources_id == "rs-1"
    assert [by_id[r.rollout_id].input for r in many] == [0, 1, 2, "dict-form"]


async def test_resources_versions_and_a_second_reader(topics: Settings) -> None:
    async with StoreClient(topics) as store:
        assert await store.get_latest_resources() is None
        a = await store.add_resources({"llm": LLM(endpoint="http://x/v1", model="m")})
        b = await store.add_resources({"prompt": PromptTemplate(template="{q}")})
        a2 = await store.update_resources(a.resources_id, {"llm": LLM(endpoint="http://y/v1", model="m")})
        assert (a.version, b.version, a2.version) == (0, 1, 2)
        assert (await store.get_latest_resources()).resources_id == a.resources_id  # type: ignore[union-attr]
        assert (await store.get_resources_by_id(b.resources_id)).version == 1  # type: ignore[union-attr]
    reader = await ResourceCache(topics).start()
    try:
        latest = await reader.wait_for_any(10)
        assert latest is not None and latest.version == 2 and latest.resources["llm"].endpoint == "http://y/v1"
        assert (await reader.resolve(b.resources_id, timeout=5)).version == 1  # type: ignore[union-attr]
    finally:
        await reader.stop()


async def test_wait_for_rollouts_reads_state_machine_snapshots(topics: Settings) -> None:
    async with StoreClient(topics) as store:
        r1 = await store.enqueue_rollout("a")
        r2 = await store.enqueue_rollout("b")
        assert await store.wait_for_rollouts(rollout_ids=[r1.rollout_id], timeout=0.2) == []

        async def state_machine() -> None:  # what the processors' state machine writes
            async with RecordProducer(topics) as producer:
                for rollout, status in ((r1, "running"), (r1, "succeeded"), (r2, "failed")):
                    snap = RolloutSnapshot(rollout=rollout.model_copy(update={"status": status}))
                    await producer.send_and_wait(topics.topic("rollouts"), snap, key=rollout.rollout_id)
                    await asyncio.sleep(0.05)

        writer = asyncio.create_task(state_machine())
        done = await store.wait_for_rollouts(rollout_ids=[r1.rollout_id, r2.rollout_id], timeout=30)
        await writer
    assert {(r.rollout_id, r.status) for r in done} == {(r1.rollout_id, "succeeded"), (r2.rollout_id, "failed")}


async def test_a_success_is_answered_once_acknowledged_and_a_failure_once_applied(topics: Settings) -> None:
    """``update_attempt(succeeded)`` of a running latest attempt returns at the broker's acknowledgement (no state
    machine is running here) and reads back succeeded at once; waits on the state machine still wait for it, and
    a failure (whose outcome the retry rules decide) waits for the state machine as before."""
    from agl_stream.client import ConsistencyTimeout
    from agl_stream.client.rollout_view import FINAL_ATTEMPT_STATUSES
    from agl_stream_processors.state_machine import rules
    from tests.agl_stream.client.pipeline import processors
    from tests.agl_stream.client.test_store_api_runner import dequeue_until

    assert FINAL_ATTEMPT_STATUSES == rules.FINAL_ATTEMPT_STATUSES  # the client's copy of the state machine's rule
    async with StoreClient(topics, consistency_timeout=3.0) as store:
        ok, bad = await store.enqueue_rollout({"q": 1}), await store.enqueue_rollout({"q": 2})
        tasks = {t.rollout_id: t for t in await dequeue_until(store, 2, "Worker-hand")}
        done = await store.update_attempt(ok.rollout_id, tasks[ok.rollout_id].attempt.attempt_id, status="succeeded")
        assert done.status == "succeeded" and done.end_time is not None
        read = await store.get_rollout_by_id(ok.rollout_id)
        assert read is not None and read.status == "succeeded" and read.attempt.status == "succeeded"  # type: ignore[union-attr]
        assert await store.wait_for_rollouts(rollout_ids=[ok.rollout_id], timeout=0.5) == []  # not applied yet
        with pytest.raises(ConsistencyTimeout, match="failed"):
            await store.update_attempt(bad.rollout_id, tasks[bad.rollout_id].attempt.attempt_id, status="failed")
        async with processors(topics):
            (applied,) = await store.wait_for_rollouts(rollout_ids=[ok.rollout_id], timeout=30)
            assert applied.status == "succeeded"
            assert (await store.get_rollout_by_id(ok.rollout_id)).status == "succeeded"  # type: ignore[union-attr]


async def test_a_new_attempt_of_a_rollout_whose_success_is_not_applied_yet_is_refused(topics: Settings) -> None:
    """After ``update_attempt(succeeded)`` answered, the rollout is terminal for this client's writes too, before
    the state machine's snapshot says so."""
    from agl_stream.client import UnsupportedOnStream
    from tests.agl_stream.client.pipeline import processors

    async with processors(topics), StoreClient(topics) as store:
        task = await store.start_rollout({"q": 1}, worker_id="Worker-hand")
        assert await store.wait_until_known(task.rollout_id, task.attempt.attempt_id, timeout=30)
        await store.update_attempt(task.rollout_id, task.attempt.attempt_id, status="succeeded")
        with pytest.raises(UnsupportedOnStream, match="succeeded"):
            await store.start_attempt(task.rollout_id)


class _SlowSinks:
    """A span reader whose sinks stored the attempt's ``finished`` event (24 spans) but only some spans so far."""

    def __init__(self) -> None:
        self.stored = 0

    async def attempt_progress(self, rollout_id, attempt_id):  # type: ignore[no-untyped-def]
        from agl_stream.client.span_reader import AttemptProgress

        self.stored = min(24, self.stored + 8)  # the sinks catch up while the reader waits
        return AttemptProgress(expected=24, stored=self.stored)

    async def missing_span_ids(self, rollout_id, attempt_id, span_ids):  # type: ignore[no-untyped-def]
        return set()

    async def read_spans(self, query):  # type: ignore[no-untyped-def]
        from agl_stream.client.paging import PaginatedResult

        return PaginatedResult([], query.limit, query.offset, self.stored)

    async def count_spans(self) -> int:
        return self.stored

    async def close(self) -> None:
        pass


async def test_a_read_waits_for_a_stored_finished_event_its_own_view_has_not_seen(topics: Settings) -> None:
    """A reader told "succeeded" by another client asks a client whose view still shows the attempt running: the
    finished event already stored in ClickHouse (its span count) is waited for all the same."""
    from agl_stream.types import Attempt, Rollout

    reader = _SlowSinks()
    async with StoreClient(topics, span_reader=reader, consistency_timeout=10) as store:  # type: ignore[arg-type]
        attempt = Attempt(rollout_id="ro-000000000lag", attempt_id="at-0000lag1", status="running")
        store.view.apply(None, RolloutSnapshot(rollout=Rollout(rollout_id="ro-000000000lag", status="running"),
                                               attempt=attempt, attempts=1, updated_at=1.0))  # fmt: skip
        page = await store.query_spans("ro-000000000lag", "at-0000lag1")
        assert reader.stored == 24 and page.total == 24
        reader.stored = 0
        unknown = await store.query_spans("ro-000000000lag", "at-0000lag9")  # an attempt the view has not seen at all
        assert reader.stored == 24 and unknown.total == 24
