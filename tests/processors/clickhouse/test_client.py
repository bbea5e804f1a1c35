"""DSN parsing (pure) and the client against real engines."""

from __future__ import annotations

import pyarrow as pa
import pytest

from agl_stream_processors.clickhouse import ClickHouse, ClickHouseConfigError, parse_dsn


def test_chdb_dsn_keeps_the_directory_and_defaults_the_database() -> None:
    target = parse_dsn("chdb:///var/lib/agl/clickhouse")
    assert (target.dsn, target.database, target.embedded) == ("chdb:///var/lib/agl/clickhouse", "agl", True)
    assert parse_dsn("chdb:///d?database=other").database == "other"


def test_http_dsn_takes_the_database_from_the_path_and_hides_credentials() -> None:
    target = parse_dsn("https://user:secret@ch.example:8443/analytics")
    assert (target.dsn, target.database, target.embedded) == ("https://user:secret@ch.example:8443", "analytics", False)
    assert "secret" not in target.describe()
    assert parse_dsn("http://h:8123").database == "agl"


@pytest.mark.parametrize(
    "dsn", ["mysql://h/db", "chdb://relative/path", "http:///nohost", "http://h:8123/bad-name!"]
)
def test_unusable_dsns_are_rejected_with_a_reason(dsn: str) -> None:
    with pytest.raises(ClickHouseConfigError):
        parse_dsn(dsn)


def test_insert_and_query_arrow_round_trip(ch: ClickHouse) -> None:
    ch.command("CREATE TABLE t (k String, ids Array(UInt32)) ENGINE = MergeTree ORDER BY k")
    assert ch.insert_arrow("t", pa.table({"k": ["a", "b"], "ids": pa.array([[1, 2], []], pa.list_(pa.uint32()))})) == 2
    assert ch.insert_arrow("t", pa.table({"k": pa.array([], pa.string()), "ids": pa.array([], pa.list_(pa.uint32()))})) == 0
    assert ch.query_arrow("SELECT k, ids FROM t ORDER BY k").to_pylist() == [
        {"k": "a", "ids": [1, 2]},
        {"k": "b", "ids": []},
    ]
    assert ch.table_exists("t") and not ch.table_exists("missing")
    assert ch.scalar("SELECT currentDatabase()") == ch.database


async def test_async_methods_run_off_the_loop(ch: ClickHouse) -> None:
    await ch.acommand("CREATE TABLE a (n UInt8) ENGINE = MergeTree ORDER BY n")
    await ch.ainsert_arrow("a", pa.table({"n": pa.array([1, 2, 3], pa.uint8())}))
    assert (await ch.aquery_arrow("SELECT sum(n) AS s FROM a")).to_pylist() == [{"s": 6}]
