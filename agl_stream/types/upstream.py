"""Upstream type names that are aliases or protocols (``agentlightning.types``), for code that annotates with them."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Optional, Protocol, Sequence, SupportsIndex, TypeVar, Union

from opentelemetry.sdk.trace import ReadableSpan

from agl_stream.semconv import AGL_EXCEPTION, AGL_MESSAGE, AGL_OBJECT, AGL_REWARD, AGL_VIRTUAL
from agl_stream.types.spans import Span, SpanCoreFields

T_co = TypeVar("T_co", covariant=True)

AttributeValue = Union[str, bool, int, float, Sequence[str], Sequence[bool], Sequence[int], Sequence[float]]
Attributes = dict[str, AttributeValue]
TraceState = dict[str, str]
StatusCode = Literal["UNSET", "OK", "ERROR"]
SpanLike = Union[ReadableSpan, Span]
#: what a rollout may return (``None``: spans were traced; a float: the final reward; spans)
RolloutRawResult = Union[None, float, list[ReadableSpan], list[SpanCoreFields], list[Span]]


class Dataset(Protocol[T_co]):
    """Anything indexable with a length (a plain list works), as upstream."""

    def __getitem__(self, index: SupportsIndex, /) -> T_co: ...

    def __len__(self) -> int: ...


class SpanNames(str, Enum):
    """Upstream's (deprecated) span-name enum; :mod:`agl_stream.semconv` has the same names."""

    REWARD = AGL_REWARD
    MESSAGE = AGL_MESSAGE
    OBJECT = AGL_OBJECT
    EXCEPTION = AGL_EXCEPTION
    VIRTUAL = AGL_VIRTUAL


class SpanAttributeNames(str, Enum):
    """Upstream's (deprecated) attribute-name enum."""

    MESSAGE = "message"
    OBJECT = "object"


class SpanRecordingContext(Protocol):
    """What a span-recording context offers (``agl.operation`` yields an ``OperationContext``)."""

    def record_exception(self, exception: BaseException) -> None: ...

    def record_attributes(self, attributes: Attributes) -> None: ...

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None: ...


class ParallelWorkerBase:
    """Upstream's lifecycle of objects replicated into worker processes (tracers, hooks, runners):
    ``init`` once, ``init_worker`` per worker, ``teardown_worker``, ``teardown``. All are no-ops here."""

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Prepare process-wide state."""

    def init_worker(self, worker_id: Any, *args: Any, **kwargs: Any) -> None:
        """Prepare per-worker state."""

    def teardown_worker(self, worker_id: Any, *args: Any, **kwargs: Any) -> None:
        """Release per-worker state."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Release process-wide state."""
