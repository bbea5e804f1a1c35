"""The embedded engine starts with bounded memory (``agl_stream_processors.clickhouse.engine``), read back from
the engine itself: chdb ignores a setting it does not apply without saying so (an unknown name, or a server
setting given to an engine already running), so only ``system.server_settings`` / ``system.settings`` tell.

Why: ClickHouse's own defaults (a 90%-of-RAM limit, 5 GiB caches) let the sinks' process grow with the work
of a long run; docs/performance.md, "Memory in a long run: the embedded engine".
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from agl_stream.config import Settings
from agl_stream_processors.clickhouse import client as client_module
from agl_stream_processors.clickhouse import connect, migrate, parse_dsn
from agl_stream_processors.clickhouse.client import ClickHouse, EngineMemoryLimitExceeded
from agl_stream_processors.clickhouse.columns import ColumnBatch
from agl_stream_processors.clickhouse.engine import ENGINE_DEFAULTS, MiB, engine_settings
from agl_stream_processors.clickhouse.spans import SPAN_SCHEMA, span_to_row
from tests.processors.clickhouse.store import make_span

ENV_VARS = ("AGL_CLICKHOUSE_MAX_MEMORY_MB", "AGL_CLICKHOUSE_ENGINE_SETTINGS")


@pytest.fixture
def dsn(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> str:
    """An embedded engine's DSN, with the environment's engine settings cleared (the defaults apply)."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    return settings.effective_clickhouse_dsn


def server_settings(ch: ClickHouse, names: list[str]) -> dict[str, str]:
    sql = "SELECT name, value FROM system.server_settings WHERE name IN {n:Array(String)}"
    _cols, rows = ch.query_rows(sql, {"n": names})
    return dict(rows)


def session_setting(ch: ClickHouse, name: str) -> str:
    return str(ch.scalar("SELECT value FROM system.settings WHERE name = {n:String}", {"n": name}))


def test_the_embedded_engine_starts_with_bounded_memory(dsn: str) -> None:
    with connect(dsn, create_database=True) as ch:
        applied = server_settings(ch, [*ENGINE_DEFAULTS, "max_server_memory_usage"])
    assert applied == {**ENGINE_DEFAULTS, "max_server_memory_usage": str(512 * MiB)}


def test_settings_and_environment_override_the_defaults(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_CLICKHOUSE_MAX_MEMORY_MB", "300")
    monkeypatch.setenv("AGL_CLICKHOUSE_ENGINE_SETTINGS", f"mark_cache_size={MiB}, max_memory_usage={100 * MiB}")
    with connect(dsn, create_database=True) as ch:  # no engine_settings: the environment's
        assert server_settings(ch, ["max_server_memory_usage", "mark_cache_size", "index_mark_cache_size"]) == {
            "max_server_memory_usage": str(300 * MiB),
            "mark_cache_size": str(MiB),
            "index_mark_cache_size": ENGINE_DEFAULTS["index_mark_cache_size"],
        }
        assert session_setting(ch, "max_memory_usage") == str(100 * MiB)  # a session setting works the same way
    # 0: ClickHouse's own limit (a share of the machine's RAM), not ours
    ours_off = engine_settings(Settings.from_env(env={"AGL_CLICKHOUSE_MAX_MEMORY_MB": "0"}))
    with connect(dsn, create_database=True, engine_settings=ours_off) as ch:
        assert int(server_settings(ch, ["max_server_memory_usage"])["max_server_memory_usage"]) != 512 * MiB


def test_a_server_setting_counts_only_when_the_engine_starts(dsn: str) -> None:
    """Why the sinks pass their settings on their first connection: a later one cannot change the engine."""
    with connect(dsn, create_database=True, engine_settings={"mark_cache_size": str(2 * MiB)}) as first:
        with connect(dsn, create_database=True, engine_settings={"mark_cache_size": str(3 * MiB)}) as second:
            assert server_settings(second, ["mark_cache_size"]) == {"mark_cache_size": str(2 * MiB)}
        assert server_settings(first, ["mark_cache_size"]) == {"mark_cache_size": str(2 * MiB)}


def test_a_server_dsn_gets_no_engine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class FakeClient:
        database = None

    def get_client(**kwargs: Any) -> FakeClient:
        seen.update(kwargs)
        return FakeClient()

    monkeypatch.setattr(client_module.clickhouse_connect, "get_client", get_client)
    ch = ClickHouse(parse_dsn("http://ch.example:8123/agl"), engine_settings={"mark_cache_size": "1"})
    assert "chdb_options" not in seen and ch.engine_settings == {}


def test_a_memory_limit_hit_says_which_setting_moves_it_and_the_engine_goes_on(dsn: str) -> None:
    limited = engine_settings(Settings.from_env(env={"AGL_CLICKHOUSE_MAX_MEMORY_MB": "256"}))
    with connect(dsn, create_database=True, engine_settings=limited) as ch:
        with pytest.raises(EngineMemoryLimitExceeded) as caught:
            ch.scalar("SELECT length(groupArray(number)) FROM numbers(80000000)")  # ~640 MB of UInt64s
        assert isinstance(caught.value, DatabaseError)  # callers' handling (the sinks retry) is unchanged
        assert "AGL_CLICKHOUSE_MAX_MEMORY_MB" in str(caught.value) and caught.value.name == "MEMORY_LIMIT_EXCEEDED"
        assert ch.scalar("SELECT count() FROM numbers(1000)") == 1000


def test_the_mark_cache_stays_under_its_cap_as_reads_touch_more_parts(dsn: str) -> None:
    cap = 16 * 1024  # reading every column of these 8 parts caches ~90 KB of marks when nothing caps it
    with connect(dsn, create_database=True, engine_settings={**ENGINE_DEFAULTS, "mark_cache_size": str(cap)}) as ch:
        columns = ", ".join(f"c{i} UInt32" for i in range(40))
        ch.command(f"CREATE TABLE wide (k UInt32, {columns}) ENGINE = MergeTree ORDER BY k "
                   "SETTINGS index_granularity = 64, min_bytes_for_wide_part = 0")  # fmt: skip
        ch.command("SYSTEM STOP MERGES wide")
        values = ", ".join(f"number AS c{i}" for i in range(40))
        for part in range(8):
            ch.command(f"INSERT INTO wide SELECT number + {part * 4000} AS k, {values} FROM numbers(4000)")
        assert ch.scalar(f"SELECT sum(k + {' + '.join(f'c{i}' for i in range(40))}) FROM wide") > 0
        loaded = ch.scalar("SELECT value FROM system.events WHERE event = 'MarkCacheMisses'")
        cached = ch.scalar("SELECT value FROM system.metrics WHERE metric = 'MarkCacheBytes'")
        assert loaded >= 8 * 41 and 0 < cached <= cap  # every column's marks of every part went through the cache


@pytest.fixture
def wide_spans() -> pa.Table:
    """1,000 spans of ~4 KB of attributes each: one of the span sink's batches, as in the benchmark."""
    spans = [make_span(f"ro-{i // 20:012x}", sequence_id=i % 20 + 1, attributes={f"attr.{k}": f"{i}-{k}-" + "v" * 240
             for k in range(16)}) for i in range(1000)]  # fmt: skip
    batch = ColumnBatch(SPAN_SCHEMA)
    batch.rows.extend(span_to_row(s) for s in spans)
    return batch.to_arrow()


def tracked_memory(ch: ClickHouse) -> int:
    return int(ch.scalar("SELECT value FROM system.metrics WHERE metric = 'MemoryTracking'"))


def test_growing_inserts_stay_under_the_engine_limit(dsn: str, wide_spans: pa.Table) -> None:
    """The sinks' work, batch after batch into the real spans table, with merges running, under a 256 MiB
    limit: every insert succeeds, tracked memory never passes the limit and comes back down, and the
    number of parts stays bounded (merges keep up, so part metadata does not grow with the work)."""
    limit = 256 * MiB
    limited = {**ENGINE_DEFAULTS, "max_server_memory_usage": str(limit)}
    with connect(dsn, create_database=True, engine_settings=limited) as ch:
        migrate(ch)
        peak, stop = [0], threading.Event()
        with connect(dsn) as watcher:  # a second connection to the same engine: polls while this one inserts

            def poll() -> None:
                while not stop.wait(0.05):
                    peak[0] = max(peak[0], tracked_memory(watcher))

            thread = threading.Thread(target=poll, daemon=True)
            thread.start()
            try:
                for n in range(40):
                    ids = pa.array([f"ro-{n:04d}{i // 20:08x}" for i in range(wide_spans.num_rows)])
                    column = wide_spans.schema.get_field_index("RolloutId")
                    ch.insert_arrow("spans", wide_spans.set_column(column, "RolloutId", ids))
            finally:
                stop.set()
                thread.join()
        assert ch.scalar("SELECT count() FROM spans") == 40 * wide_spans.num_rows
        assert 0 < peak[0] <= limit
        assert ch.scalar("SELECT count() FROM system.parts WHERE active AND table = 'spans'") < 40
