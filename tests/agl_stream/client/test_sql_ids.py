"""Bounded id lists (``agl_stream.client.sql_ids``) and the span reader's span-id lookup with 30,000 ids.

The lookup is checked on the embedded engine and through the SQL door: over HTTP a long
``{ids:Array(String)}`` parameter went into a multipart form the door does not read (and a server
caps at 128 KiB), so one query naming every id failed there.
"""

from __future__ import annotations


import pytest

from agl_stream.client.clickhouse_reader import ClickHouseSpanReader
from agl_stream.client.sql_ids import (
    MAX_ID_BYTES_PER_QUERY,
    MAX_IDS_PER_QUERY,
    array_literal,
    chunks,
    in_list,
    in_lists,
    literal,
)
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.clickhouse.columns import ColumnBatch
from agl_stream_processors.clickhouse.spans import SPAN_SCHEMA, span_to_row
from tests.processors.clickhouse.store import ch, make_span, store_dsn  # noqa: F401  (fixtures)
from tests.processors.clickhouse.through_door import door_dsn

MANY = 30_000
AWKWARD = ["it's", "back\\slash", "\\'", "end\\", "new\nline\ttab", "{r:String}", "%(x)s $$ ?", "ünï €",
           "'); DROP TABLE t; --"]  # fmt: skip


def test_chunks_are_bounded_distinct_and_in_order() -> None:
    ids = [f"ro-{i:012d}" for i in range(2_500)]
    got = list(chunks(ids + ids[:10]))
    assert [len(c) for c in got] == [MAX_IDS_PER_QUERY, MAX_IDS_PER_QUERY, 500]
    assert [i for c in got for i in c] == ids  # a repeated id once: the chunks partition the distinct ids
    long_ids = ["x" * 1_000 + str(i) for i in range(100)]
    for chunk in chunks(long_ids):
        assert len(",".join(literal(i) for i in chunk).encode()) <= MAX_ID_BYTES_PER_QUERY
    assert [len(c) for c in chunks(long_ids)] == [32, 32, 32, 4]
    assert list(chunks(["y" * (2 * MAX_ID_BYTES_PER_QUERY), "a"])) == [["y" * (2 * MAX_ID_BYTES_PER_QUERY)], ["a"]]
    assert list(chunks([])) == [] and list(in_lists([])) == []
    assert list(chunks([("r", "a"), ("r", "b"), ("r", "a")], max_ids=1)) == [[("r", "a")], [("r", "b")]]


def test_one_query_names_a_bounded_list() -> None:
    assert in_list(["a", "it's"]) == "('a','it\\'s')"
    assert in_list([("r", "a")]) == "(('r','a'))" and array_literal([("r", "a"), ("s", "b")]) == "[('r','a'),('s','b')]"
    with pytest.raises(ValueError, match="chunks"):
        in_list([str(i) for i in range(MAX_IDS_PER_QUERY + 1)])
    with pytest.raises(ValueError, match="empty"):
        in_list([])
    with pytest.raises(TypeError):
        literal(3)  # type: ignore[arg-type]


def test_literals_read_back_exactly(ch: ClickHouse) -> None:  # noqa: F811
    """Every id a caller may hand over matches itself, and only itself, on the engine."""
    ch.command("CREATE TABLE ids (Id String, Other String) ENGINE = MergeTree ORDER BY Id")
    rows = ", ".join(f"({literal(i)}, {literal(i + '!')})" for i in AWKWARD)
    ch.command(f"INSERT INTO ids VALUES {rows}")
    assert sorted(r[0] for r in ch.query_rows(f"SELECT Id FROM ids WHERE Id IN {in_list(AWKWARD)}")[1]) == sorted(AWKWARD)
    pairs = [(i, i + "!") for i in AWKWARD]
    got = ch.query_rows(f"SELECT Id FROM ids WHERE (Id, Other) IN {in_list(pairs[:1])} OR (Id, Other) IN {in_list(pairs[1:])}")[1]
    assert sorted(r[0] for r in got) == sorted(AWKWARD)
    assert ch.query_rows(f"SELECT arrayJoin({array_literal(AWKWARD)})")[1] == [(i,) for i in AWKWARD]
    assert ch.scalar(f"SELECT count() FROM ids WHERE Id IN {in_list(['it', 'back', chr(39)])}") == 0


@pytest.mark.integration
@pytest.mark.parametrize("through", ["engine", "door"])
async def test_missing_span_ids_with_30000_ids(ch: ClickHouse, store_dsn: str, through: str) -> None:  # noqa: F811
    if through == "door" and not ch.target.embedded:
        pytest.skip("the SQL door serves an embedded engine")
    rid, aid = "ro-00000000c0de", "at-00000001"
    present = [make_span(rid, aid, n, span_id=f"{0xA0000000 + n:016x}") for n in (1, 2)]
    present.append(make_span(rid, aid, 3, span_id="it's {a:String} \\"))  # read back exactly, whatever it holds
    other_attempt = make_span(rid, "at-00000002", 4, span_id=f"{0xA0000000 + 4:016x}")
    ch.insert_arrow("spans", ColumnBatch(SPAN_SCHEMA, [span_to_row(s) for s in [*present, other_attempt]]).to_arrow())
    absent = [f"{i:016x}" for i in range(MANY - 1)] + ["{r:String}"]
    asked = [present[0].span_id, *absent[: MANY // 2], present[1].span_id, *absent[MANY // 2 :], present[2].span_id,
             other_attempt.span_id]  # fmt: skip

    async def missing(dsn: str) -> set[str]:
        reader = ClickHouseSpanReader(dsn, ch.database)
        try:
            return await reader.missing_span_ids(rid, aid, asked)
        finally:
            await reader.close()

    if through == "door":
        async with door_dsn(ch) as dsn:
            got = await missing(dsn)
    else:
        got = await missing(store_dsn)
    assert got == set(absent) | {other_attempt.span_id}  # another attempt's span is not this attempt's
