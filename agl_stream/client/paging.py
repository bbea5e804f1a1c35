"""Upstream's query conventions for in-memory views: filters, sort, pagination, ``PaginatedResult``, ``UNSET``.

Semantics follow ``LightningStore`` 0.3: a field filter has operators ``exact``, ``within`` and
``contains`` (substring for strings); the optional filters combine with ``filter_logic`` (``and`` /
``or``) while *must* filters always apply; ``sort_by`` names a model field (missing ``*_time``
values sort last, other missing values sort as the empty value of their type); ``limit=-1`` means
no limit; ``total`` counts every match before pagination. Without ``sort_by`` items keep their
insertion order.
"""

from __future__ import annotations

from typing import Any, Generic, Iterable, Iterator, Literal, Mapping, Optional, Sequence, TypeVar, Union, overload

from pydantic import BaseModel

T = TypeVar("T")

FilterLogic = Literal["and", "or"]
SortOrder = Literal["asc", "desc"]
#: field name -> {"exact": value, "within": values, "contains": text}; None values are ignored
Filters = Mapping[str, Mapping[str, Any]]


class _UnsetType:
    """Upstream's sentinel for "argument not given" (``None`` is a value to set)."""

    __slots__ = ()
    _instance: Optional["_UnsetType"] = None

    def __new__(cls) -> "_UnsetType":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET = _UnsetType()
Unset = _UnsetType


class PaginatedResult(Sequence[T], Generic[T]):
    """A page of results that behaves like a sequence and carries ``limit``, ``offset`` and ``total``."""

    __slots__ = ("items", "limit", "offset", "total")

    def __init__(self, items: Sequence[T], limit: int, offset: int, total: int) -> None:
        self.items = list(items)
        self.limit = limit
        self.offset = offset
        self.total = total

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[T, list[T]]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PaginatedResult):
            return (self.items, self.limit, self.offset, self.total) == (other.items, other.limit, other.offset, other.total)
        if isinstance(other, list):
            return self.items == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"PaginatedResult(items={self.items!r}, limit={self.limit}, offset={self.offset}, total={self.total})"


def check_paging(limit: int, offset: int, sort_order: str, filter_logic: str = "and") -> None:
    if limit < -1:
        raise ValueError(f"limit must be -1 (no limit) or >= 0, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if sort_order not in ("asc", "desc"):
        raise ValueError(f"sort_order must be 'asc' or 'desc', got {sort_order!r}")
    if filter_logic not in ("and", "or"):
        raise ValueError(f"filter_logic must be 'and' or 'or', got {filter_logic!r}")


def _conditions(item: Any, filters: Filters) -> list[bool]:
    results: list[bool] = []
    for field, ops in filters.items():
        value = getattr(item, field, None)
        for op, expected in ops.items():
            if expected is None:
                continue
            if op == "exact":
                results.append(value == expected)
            elif op == "within":
                results.append(value in expected)
            elif op == "contains":
                results.append(value is not None and expected in value)
            else:
                raise ValueError(f"unsupported filter operator {op!r} for field {field!r}")
    return results


def matches(item: Any, filters: Filters, filter_logic: FilterLogic = "and", must: Optional[Filters] = None) -> bool:
    if must and not all(_conditions(item, must)):
        return False
    conditions = _conditions(item, filters)
    if not conditions:  # no optional filter given: everything that passed the must filters matches
        return True
    return all(conditions) if filter_logic == "and" else any(conditions)


def _sort_key(model: type[BaseModel], field: str) -> Any:
    if field not in model.model_fields:
        raise ValueError(f"cannot sort by {field!r}: {model.__name__} has no such field")
    annotation = str(model.model_fields[field].annotation)
    if field.endswith("_time"):
        return lambda item: (1, 0.0) if getattr(item, field) is None else (0, getattr(item, field))
    if "int" in annotation or "float" in annotation:
        empty: Any = 0
    elif "str" in annotation or "Literal" in annotation:
        empty = ""
    else:
        raise ValueError(f"cannot sort by {field!r}: only numeric and string fields of {model.__name__} sort")

    def key(item: Any) -> Any:
        value = getattr(item, field)
        return empty if value is None else value

    return key


def query(
    items: Iterable[T],
    model: type[BaseModel],
    *,
    filters: Optional[Filters] = None,
    filter_logic: FilterLogic = "and",
    must: Optional[Filters] = None,
    sort_by: Optional[str] = None,
    sort_order: SortOrder = "asc",
    limit: int = -1,
    offset: int = 0,
) -> PaginatedResult[T]:
    """Filter, sort and paginate ``items`` (instances of ``model``) with upstream's semantics."""
    check_paging(limit, offset, sort_order, filter_logic)
    found = [item for item in items if matches(item, filters or {}, filter_logic, must)]
    if sort_by:
        found.sort(key=_sort_key(model, sort_by), reverse=sort_order == "desc")
    page = found[offset:] if limit == -1 else found[offset : offset + limit]
    return PaginatedResult(page, limit, offset, len(found))
