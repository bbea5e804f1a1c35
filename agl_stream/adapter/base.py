"""Adapter base classes and the grouping every adapter relies on (by attempt, never by trace id)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, Iterable, Sequence, TypeVar

from agl_stream._porting import module_getattr
from agl_stream.types import Span

T_from = TypeVar("T_from")
T_to = TypeVar("T_to")


class Adapter(ABC, Generic[T_from, T_to]):
    """A callable that turns one kind of data into another (upstream ``Adapter``)."""

    def __call__(self, source: T_from) -> T_to:
        return self.adapt(source)

    @abstractmethod
    def adapt(self, source: T_from) -> T_to: ...


class TraceAdapter(Adapter[Sequence[Span], T_to], Generic[T_to]):
    """An adapter whose input is the spans of one attempt (upstream ``TraceAdapter``)."""


def group_spans_by_attempt(spans: Iterable[Span]) -> dict[tuple[str, str], list[Span]]:
    """Split spans into one list per (rollout_id, attempt_id), each ordered by sequence id then start time.

    One attempt may span several trace ids (a plain OTel tracer starts a new trace per root span),
    so trace ids must not be used to group.
    """
    groups: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        groups.setdefault((span.rollout_id, span.attempt_id), []).append(span)
    for items in groups.values():
        items.sort(key=span_order_key)
    return groups


def span_order_key(span: Span) -> tuple[int, float, str]:
    """Sequence id first (immune to clock skew), then start time, then span id for a total order."""
    return (span.sequence_id, span.start_time if span.start_time is not None else 0.0, span.span_id)


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
