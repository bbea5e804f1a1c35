"""Errors of the store API on a stream: what cannot keep upstream's semantics, and reads that could not catch up."""

from __future__ import annotations


class UnsupportedOnStream(NotImplementedError):
    """A store method (or an argument of one) whose upstream semantics a stream cannot keep.

    The message says why and what to use instead; ``docs/store-api.md`` lists every case.
    """

    def __init__(self, method: str, reason: str, instead: str) -> None:
        self.method, self.reason, self.instead = method, reason, instead
        super().__init__(f"{method}: {reason}. Use {instead} instead (see docs/store-api.md).")


class ConsistencyTimeout(TimeoutError):
    """A read waited for the pipeline to reflect earlier writes (read-your-writes) and gave up."""


class SpanReaderUnavailable(RuntimeError):
    """``query_spans`` has no ClickHouse it can read (e.g. the embedded engine is owned by another process)."""
