"""Build pyarrow tables from row dicts, isolating the rows that cannot be converted.

Sinks turn each record into row dicts first and only then into columns, so one bad value (a token
id that does not fit ``UInt32``, a non-finite timestamp) fails that record alone: it becomes a dead
letter and the rest of the batch is inserted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import accumulate, chain
from typing import Any, Optional, Protocol, Sequence

import pyarrow as pa
import pydantic_core

UTC_NS = pa.timestamp("ns", tz="UTC")
UTC_US = pa.timestamp("us", tz="UTC")
UTC_MS = pa.timestamp("ms", tz="UTC")
STR_MAP = pa.map_(pa.string(), pa.string())
STR_LIST = pa.list_(pa.string())
U32_MAX = 2**32 - 1


class RowError(ValueError):
    """A record cannot be turned into table rows; the message is the dead-letter reason."""


def to_json(value: Any) -> str:
    """Compact JSON for free-form fields (inputs, metadata, stats)."""
    return pydantic_core.to_json(value, fallback=repr).decode()


def seconds_to(value: Optional[float], scale: int, what: str) -> Optional[int]:
    """Epoch seconds to an integer count of ``1/scale`` seconds (``None`` stays ``None``)."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise RowError(f"{what} must be a non-negative finite epoch time, got {value!r}")
    whole = math.floor(value)
    return whole * scale + round((value - whole) * scale)  # the fraction is exact; avoids 256 ns float steps


def uint32_list(values: Any, what: str) -> list[int]:
    """Token ids; ``min``/``max`` check the range at C speed (pyarrow rejects non-integers later)."""
    if values is None:
        return []
    if not isinstance(values, list):
        if not isinstance(values, tuple):
            raise RowError(f"{what} must be a list of integers, got {type(values).__name__}")
        values = list(values)
    if values:
        try:
            low, high = min(values), max(values)
        except TypeError:
            raise RowError(f"{what} must hold integers only") from None
        if not (isinstance(low, int) and isinstance(high, int)) or low < 0 or high > U32_MAX:
            raise RowError(f"{what} holds values outside the integers in [0, 2^32): min {low!r}, max {high!r}")
    return values


def float_list(values: Any, what: str) -> list[float]:
    """Logprobs; element types are checked by pyarrow when the column is built."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        raise RowError(f"{what} must be a list of numbers, got {type(values).__name__}")
    return list(values)


class TableBuilder(Protocol):
    """What a sink appends a batch's records to before one insert (see ``Sink._rows``)."""

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        """Rows a spec's ``to_rows`` made from a decoded record."""

    def add_record(self, raw: Optional[bytes], record_timestamp_ms: Optional[int]) -> bool:
        """Append a record's rows straight from its bytes, all or nothing; False leaves it to the model."""

    def to_arrow(self) -> pa.Table: ...


@dataclass
class ColumnBatch:
    """Row dicts of one table, converted to a pyarrow table with a fixed schema."""

    schema: pa.Schema
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)

    def add_record(self, raw: Optional[bytes], record_timestamp_ms: Optional[int]) -> bool:
        return False  # these tables are built from decoded models only

    def to_arrow(self) -> pa.Table:
        arrays = [arrow_array([row.get(f.name) for row in self.rows], f.type) for f in self.schema]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def check_row(self, row: dict[str, Any]) -> None:
        """Raise :class:`RowError` if ``row`` does not fit the schema (used to isolate bad rows)."""
        for f in self.schema:
            try:
                arrow_array([row.get(f.name)], f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
                raise RowError(f"column {f.name} ({f.type}): {exc}") from None


def arrow_array(values: list[Any], type_: pa.DataType) -> pa.Array:
    """``pa.array`` with a fast path for timestamps: Python ints straight into a timestamp type take
    a per-value slow path (about 1000x slower than int64 followed by a cast)."""
    if pa.types.is_timestamp(type_):
        return pa.array(values, type=pa.int64()).cast(type_)
    if pa.types.is_list(type_) and pa.types.is_timestamp(type_.value_type):
        return pa.array(values, type=pa.list_(pa.int64())).cast(type_)
    return pa.array(values, type=type_)


def map_array(maps: Sequence[dict[str, str]], type_: pa.DataType) -> pa.MapArray:
    """A ``Map(String, String)`` column from one dict per row.

    Built from flat keys, values and row offsets: ``pa.array`` of per-row ``(key, value)`` pairs
    converts every pair on its own, which was a third of the span sink's arrow time."""
    offsets = pa.array(list(accumulate(map(len, maps), initial=0)), pa.int32())
    keys = pa.array(list(chain.from_iterable(maps)), type_.key_type)
    items = pa.array(list(chain.from_iterable(map(dict.values, maps))), type_.item_type)
    return pa.MapArray.from_arrays(offsets, keys, items, type=type_)
