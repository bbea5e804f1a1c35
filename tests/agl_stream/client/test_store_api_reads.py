"""Read side of the store API: upstream's query semantics, the ClickHouse span reader, workers, capabilities."""

from __future__ import annotations

import time

import pytest

from agl_stream.client import StoreClient, UnsupportedOnStream
from agl_stream.client.clickhouse_reader import ClickHouseSpanReader
from agl_stream.client.paging import query
from agl_stream.client.span_reader import SpanQuery
from agl_stream.config import Settings
from agl_stream.types import PromptTemplate, Rollout, Span
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.clickhouse.columns import ColumnBatch
from agl_stream_processors.clickhouse.spans import SPAN_SCHEMA, span_to_row
from tests.processors.clickhouse.store import ch, store_dsn  # noqa: F401  (fixtures)


def test_query_semantics_match_upstream() -> None:
    rollouts = [
        Rollout(rollout_id="ro-a1", status="succeeded", start_time=3.0, end_time=9.0),
        Rollout(rollout_id="ro-b2", status="failed", start_time=1.0),
        Rollout(rollout_id="ro-a3", status="running", start_time=2.0, end_time=5.0),
    ]
    ids = lambda page: [r.rollout_id for r in page]  # noqa: E731
    assert ids(query(rollouts, Rollout, filters={"status": {"within": ["succeeded", "running"]}})) == ["ro-a1", "ro-a3"]
    both = {"status": {"within": ["failed"]}, "rollout_id": {"contains": "a1"}}
    assert ids(query(rollouts, Rollout, filters=both)) == []
    assert ids(query(rollouts, Rollout, filters=both, filter_logic="or")) == ["ro-a1", "ro-b2"]
    # missing *_time values sort last ascending (first descending), like upstream's +infinity
    assert ids(query(rollouts, Rollout, sort_by="end_time")) == ["ro-a3", "ro-a1", "ro-b2"]
    assert ids(query(rollouts, Rollout, sort_by="end_time", sort_order="desc")) == ["ro-b2", "ro-a1", "ro-a3"]
    page = query(rollouts, Rollout, sort_by="start_time", limit=1, offset=1)
    assert ids(page) == ["ro-a3"] and (page.total, page.limit, page.offset) == (3, 1, 1)
    assert ids(query(rollouts, Rollout, offset=2)) == ["ro-a3"]  # no sort_by: insertion order
    with pytest.raises(ValueError, match="no such field"):
        query(rollouts, Rollout, sort_by="nope")
    with pytest.raises(ValueError, match="limit"):
        query(rollouts, Rollout, limit=-2)


def _spans() -> list[Span]:
    out = []
    for i, (name, parent) in enumerate([("agent planner", None), ("openai.chat.completion", "0000000000000001"),
                                        ("agentlightning.annotation", "0000000000000001")]):  # fmt: skip
        out.append(Span(rollout_id="ro-000000000r01", attempt_id="at-0000a001", sequence_id=i + 1, trace_id="t" * 32,
                        span_id=f"{i + 1:016x}", parent_id=parent, name=name, start_time=100.0 + i + 0.123456789,
                        end_time=None if i == 2 else 100.5 + i, attributes={"n": i, "prompt_token_ids": [i, i + 1]}))  # fmt: skip
    out.append(out[0].model_copy(update={"attempt_id": "at-0000a002", "span_id": "00000000000000ff"}))
    return out


async def test_clickhouse_reader_filters_sorts_and_pages(ch: ClickHouse, store_dsn: str) -> None:  # noqa: F811
    spans = _spans()
    ch.insert_arrow("spans", ColumnBatch(SPAN_SCHEMA, [span_to_row(s) for s in spans]).to_arrow())
    reader = ClickHouseSpanReader(store_dsn, ch.database)
    try:
        rid = "ro-000000000r01"
        every = await reader.read_spans(SpanQuery(rid))
        assert every.total == 4 and [s.sequence_id for s in every] == [1, 1, 2, 3]  # every attempt, by sequence id
        first = await reader.read_spans(SpanQuery(rid, "at-0000a001"))
        fields = lambda s: (s.span_id, s.parent_id, s.name, s.start_time, s.end_time, s.attributes)  # noqa: E731
        assert [fields(s) for s in first] == [fields(s) for s in spans[:3]]  # exact round trip (ns, types)
        named = await reader.read_spans(SpanQuery(rid, "at-0000a001", contains={"name": "planner"}))
        assert [s.name for s in named] == ["agent planner"]
        either = await reader.read_spans(SpanQuery(rid, "at-0000a001", exact={"span_id": "0000000000000003"},
                                                   contains={"name": "openai"}, filter_logic="or"))  # fmt: skip
        assert [s.sequence_id for s in either] == [2, 3]
        children = await reader.read_spans(SpanQuery(rid, "at-0000a001", exact={"parent_id": "0000000000000001"},
                                                     sort_by="end_time", sort_order="desc", limit=1, offset=0))  # fmt: skip
        assert [s.sequence_id for s in children] == [3] and children.total == 2  # a missing end time sorts as +inf
        paged = await reader.read_spans(SpanQuery(rid, "at-0000a001", sort_by="name", offset=1))
        assert [s.name for s in paged] == ["agentlightning.annotation", "openai.chat.completion"]
        assert await reader.missing_span_ids(rid, "at-0000a001", ["0000000000000002", "00000000000000aa"]) == {"00000000000000aa"}
        progress = await reader.attempt_progress(rid, "at-0000a001")
        assert (progress.expected, progress.stored, progress.complete) == (None, 3, False)  # no finished event stored
        assert await reader.count_spans() == 4
        # a span delivered again (a retried export), renamed in between: read once, as its last copy (as FINAL)
        time.sleep(0.01)  # InsertedAt has millisecond resolution
        again = spans[1].model_copy(update={"name": "openai.chat.completion.v2"})
        ch.insert_arrow("spans", ColumnBatch(SPAN_SCHEMA, [span_to_row(again)]).to_arrow())
        reread = await reader.read_spans(SpanQuery(rid, "at-0000a001"))
        assert reread.total == 3 and [s.name for s in reread][1] == "openai.chat.completion.v2"
        renamed = await reader.read_spans(SpanQuery(rid, "at-0000a001", contains={"name": "openai"}, limit=5))
        assert [s.name for s in renamed] == ["openai.chat.completion.v2"] and renamed.total == 1
        with pytest.raises(ValueError, match="sortable"):
            SpanQuery(rid, sort_by="attributes")
    finally:
        await reader.close()


async def test_workers_from_heartbeats(topics: Settings) -> None:
    async with StoreClient(topics) as store:
        worker = await store.update_worker("Worker-hand", {"cpu": 0.5})
        assert worker.heartbeat_stats == {"cpu": 0.5} and worker.last_heartbeat_time is not None
        await store.update_worker("Worker-other")
    async with StoreClient(topics) as reader:  # a second client learns them from agl.workers
        page = await reader.query_workers(worker_id_contains="hand")
        assert [w.worker_id for w in page] == ["Worker-hand"] and page[0].heartbeat_stats == {"cpu": 0.5}
        assert (await reader.get_worker_by_id("Worker-other")) is not None
        assert (await reader.query_workers(sort_by="worker_id", sort_order="desc")).total == 2
        res = [await reader.add_resources({"p": PromptTemplate(template=str(i))}) for i in range(3)]
        by_version = await reader.query_resources(sort_by="version", sort_order="desc", limit=2)
        assert [r.resources_id for r in by_version] == [res[2].resources_id, res[1].resources_id]
        assert [r.version for r in await reader.query_resources(resources_id=res[0].resources_id)] == [0]


async def test_capabilities_statistics_and_otlp_endpoint(topics: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_OTLP_ENDPOINT", raising=False)
    async with StoreClient(topics) as store:
        assert store.capabilities == {"thread_safe": False, "async_safe": True, "zero_copy": False, "otlp_traces": False}
        with pytest.raises(UnsupportedOnStream, match="AGL_OTLP_ENDPOINT"):
            store.otlp_traces_endpoint()
        monkeypatch.setenv("AGL_OTLP_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
        assert store.capabilities["otlp_traces"] and store.otlp_traces_endpoint() == "http://127.0.0.1:4318/v1/traces"
        await store.enqueue_rollout({"q": 1})
        stats = await store.statistics()
        assert stats["total_rollouts"] == 1 and stats["total_attempts"] == 1 and "total_spans" not in stats
