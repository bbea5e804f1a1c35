"""The tracer interface the runner and the emitters use, and the "active attempt" of the current context.

An attempt is *active* inside ``tracer.trace_context(rollout_id=..., attempt_id=...)``. The active
attempt lives in a ``contextvars.ContextVar``, so it follows the agent into coroutines, tasks and
``asyncio.to_thread`` workers; every span started there belongs to that attempt.
"""

from __future__ import annotations

import contextlib
import contextvars
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator, Optional, Sequence

from agl_stream._porting import module_getattr
from agl_stream.tracer.exporter import AttemptCounters
from agl_stream.types import SpanCoreFields
from agl_stream.types.upstream import ParallelWorkerBase

#: upstream's alias for the async functions a tracer wraps
T_func = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class ActiveAttempt:
    tracer: "Tracer"
    state: AttemptCounters


_ACTIVE: contextvars.ContextVar[Optional[ActiveAttempt]] = contextvars.ContextVar("agl_active_attempt", default=None)


def get_active_attempt() -> Optional[ActiveAttempt]:
    return _ACTIVE.get()


_PROCESS_TRACER: Optional["Tracer"] = None


def get_active_tracer() -> Optional["Tracer"]:
    """The tracer of the attempt running in this context; outside any attempt, the one set with
    :func:`set_active_tracer` (None if none was)."""
    active = _ACTIVE.get()
    return active.tracer if active is not None else _PROCESS_TRACER


def set_active_tracer(tracer: "Tracer") -> None:
    """Make ``tracer`` receive emitted spans outside any attempt (upstream's name; e.g. a ``DummyTracer``
    so code that calls ``emit_reward`` runs in a unit test). An attempt's own tracer still wins inside it."""
    global _PROCESS_TRACER
    if _PROCESS_TRACER is not None and _PROCESS_TRACER is not tracer:
        raise ValueError("an active tracer is already set; call clear_active_tracer() first")
    _PROCESS_TRACER = tracer


def clear_active_tracer() -> None:
    global _PROCESS_TRACER
    _PROCESS_TRACER = None


class Tracer(ParallelWorkerBase, ABC):
    """Upstream's ``Tracer`` surface: init/teardown, ``trace_context``, ``create_span``, ``get_last_trace``."""

    name: str = "agl-stream"

    def __init__(self) -> None:
        self._last: Optional[AttemptCounters] = None

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Prepare process-wide state (called once by the runner)."""

    def init_worker(self, worker_id: Any, *args: Any, **kwargs: Any) -> None:
        """Prepare per-worker state."""

    def teardown_worker(self, worker_id: Any, *args: Any, **kwargs: Any) -> None:
        """Release per-worker state."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Flush and release process-wide state."""

    @contextlib.contextmanager
    def attempt_scope(
        self, *, rollout_id: str, attempt_id: str, name: Optional[str] = None, extra_resource: Optional[dict[str, Any]] = None
    ) -> Iterator[AttemptCounters]:
        """Make an attempt active in this context (sync form of :meth:`trace_context`)."""
        state = AttemptCounters(rollout_id=rollout_id, attempt_id=attempt_id, tracer_name=self.name,
                                extra_resource=dict(extra_resource or {}))  # fmt: skip
        token = _ACTIVE.set(ActiveAttempt(self, state))
        try:
            yield state
        finally:
            _ACTIVE.reset(token)
            self._last = state

    @contextlib.asynccontextmanager
    async def trace_context(
        self, name: Optional[str] = None, *, rollout_id: str, attempt_id: str, extra_resource: Optional[dict[str, Any]] = None
    ) -> AsyncIterator[AttemptCounters]:
        with self.attempt_scope(rollout_id=rollout_id, attempt_id=attempt_id, name=name, extra_resource=extra_resource) as state:
            yield state

    def get_last_trace(self) -> list[Any]:
        """Spans of the most recently finished attempt of this tracer (OTel spans and returned agl spans)."""
        return list(self._last.spans) if self._last is not None else []

    @abstractmethod
    def create_span(self, core: SpanCoreFields) -> None:
        """Record one already-complete span (what the emitters produce) in the active attempt."""

    @abstractmethod
    def add_spans(self, spans: Sequence[Any]) -> int:
        """Record spans an agent returned (agl Spans, SpanCoreFields or OTel ReadableSpans); returns how many."""

    @abstractmethod
    async def flush_attempt(self, state: AttemptCounters, timeout: Optional[float] = None) -> None:
        """Wait until every span of the attempt left the process (or failed)."""


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
