"""Bounded id lists for ClickHouse ``IN``: a long list of caller-supplied ids becomes several queries.

Why: a query that names every id it was given grows with the caller. Inlined as literals it passes
ClickHouse's ``max_query_size`` (256 KiB: ``Code: 62 ... Max query size exceeded``) at about 14,000
short ids. As an ``{ids:Array(String)}`` parameter it is no better over HTTP: past 4 KiB of
parameters clickhouse-connect moves them into a multipart form field, which a server caps at 128 KiB
(``http_max_field_value_size``) and the SQL door (``agl_stream_processors.clickhouse.door``) does not
read at all. ``external_data`` (a temporary table sent with the query) is refused by
clickhouse-connect's chdb backend (``NotSupportedError``). What works on every transport - ``chdb://``,
a ClickHouse server over ``http(s)://``, the SQL door - is a bounded chunk of ids per query, inlined
as escaped literals in the SQL text (the request body), with the caller merging the chunks' results.

:func:`chunks` drops repeated ids, so the chunks partition the distinct ids: per-chunk counts and
per-id rows add up to the answer for the whole list.
"""

from __future__ import annotations

from typing import Hashable, Iterable, Iterator, Sequence, TypeVar, Union

Id = Union[str, tuple[str, ...]]
IdT = TypeVar("IdT", bound=Hashable)

#: ids one query may name; 1,000 short ids are ~18 KB of SQL, and each query costs one round trip
MAX_IDS_PER_QUERY = 1_000
#: bytes of literal text one chunk may take (long ids): a query may repeat its list ~7 times and
#: still fit ClickHouse's default max_query_size of 256 KiB
MAX_ID_BYTES_PER_QUERY = 32 * 1024


def literal(value: Id) -> str:
    """A ClickHouse string literal (or a tuple of them) that reads back as exactly ``value``."""
    if isinstance(value, tuple):
        return "(" + ",".join(literal(v) for v in value) + ")"
    if not isinstance(value, str):
        raise TypeError(f"ids are strings or tuples of strings, not {type(value).__name__}")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def chunks(
    ids: Iterable[IdT], *, max_ids: int = MAX_IDS_PER_QUERY, max_bytes: int = MAX_ID_BYTES_PER_QUERY
) -> Iterator[list[IdT]]:
    """The distinct ``ids`` in first-seen order, in chunks of at most ``max_ids`` ids and ``max_bytes`` of
    literal text (an id longer than that alone is a chunk of its own). Nothing for no ids."""
    if max_ids < 1:
        raise ValueError("max_ids must be at least 1")
    seen: set[IdT] = set()
    chunk: list[IdT] = []
    size = 0
    for value in ids:
        if value in seen:
            continue
        seen.add(value)
        cost = len(literal(value).encode()) + 1  # the comma
        if chunk and (len(chunk) >= max_ids or size + cost > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(value)
        size += cost
    if chunk:
        yield chunk


def _bounded(ids: Sequence[Id]) -> list[str]:
    if not ids:
        raise ValueError("an empty id list matches nothing: skip the query instead")
    if len(ids) > MAX_IDS_PER_QUERY:
        raise ValueError(f"{len(ids)} ids in one query (at most {MAX_IDS_PER_QUERY}): split them with chunks()")
    return [literal(v) for v in ids]


def in_list(ids: Sequence[Id]) -> str:
    """``('a','b')``: the right side of ``x IN ...`` for one chunk (``(x, y) IN`` for tuples)."""
    return "(" + ",".join(_bounded(ids)) + ")"


def array_literal(ids: Sequence[Id]) -> str:
    """``['a','b']``: one chunk as an array literal (for ``arrayJoin``)."""
    return "[" + ",".join(_bounded(ids)) + "]"


def in_lists(ids: Iterable[Id]) -> Iterator[str]:
    """One :func:`in_list` per chunk of ``ids``: run the query once per item and merge."""
    for chunk in chunks(ids):
        yield in_list(chunk)


__all__ = [
    "MAX_IDS_PER_QUERY", "MAX_ID_BYTES_PER_QUERY", "Id", "array_literal", "chunks", "in_list", "in_lists", "literal",
]  # fmt: skip
