"""Request and response bodies of upstream's store REST API (``/v1/agl/...``), as its clients send them.

Field names, defaults and which fields are query parameters are facts of upstream 0.3's wire API
(``LightningStoreClient`` and ``LightningStoreServer``): an upstream client must not notice it talks to
agl-stream. Unknown fields are ignored, as pydantic's default does upstream. The helpers at the end apply
upstream's rules to them: page checks, fields sent or not, models as JSON.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from fastapi import HTTPException, Query
from pydantic import BaseModel, Field

from agl_stream.client import UNSET, EnqueueRolloutRequest, PaginatedResult
from agl_stream.types import AttemptStatus, RolloutConfig, RolloutMode, RolloutStatus, WorkerStatus

SortOrder = Literal["asc", "desc"]
FilterLogic = Literal["and", "or"]


class StartRolloutBody(BaseModel):
    input: Any = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[dict[str, Any]] = None
    worker_id: Optional[str] = None


class EnqueueItem(BaseModel):
    input: Any = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[dict[str, Any]] = None  # upstream's client sends null for "none"

    def request(self) -> EnqueueRolloutRequest:
        return EnqueueRolloutRequest(input=self.input, mode=self.mode, resources_id=self.resources_id,
                                     config=self.config, metadata=self.metadata or {})  # fmt: skip


class EnqueueBody(BaseModel):
    rollouts: list[EnqueueItem]


class DequeueBody(BaseModel):
    limit: int = 1
    worker_id: Optional[str] = None


class WorkerIdBody(BaseModel):
    worker_id: Optional[str] = None


class Page(BaseModel):
    """Pagination and sorting shared by every query (``limit=-1``: no limit)."""

    limit: int = -1
    offset: int = 0
    sort_by: Optional[str] = None
    sort_order: SortOrder = "asc"


class RolloutQuery(Page):
    # Query-string lists arrive as repeated parameters (?status_in=a&status_in=b).
    status_in: Optional[list[RolloutStatus]] = Field(Query(default=None))
    rollout_id_in: Optional[list[str]] = Field(Query(default=None))
    rollout_id_contains: Optional[str] = None
    filter_logic: FilterLogic = "and"


class AttemptQuery(Page):
    sort_by: Optional[str] = "sequence_id"


class ResourcesQuery(Page):
    resources_id: Optional[str] = None
    resources_id_contains: Optional[str] = None


class SpanQueryBody(Page):
    rollout_id: str
    attempt_id: Optional[str] = None
    trace_id: Optional[str] = None
    trace_id_contains: Optional[str] = None
    span_id: Optional[str] = None
    span_id_contains: Optional[str] = None
    parent_id: Optional[str] = None
    parent_id_contains: Optional[str] = None
    name: Optional[str] = None
    name_contains: Optional[str] = None
    filter_logic: FilterLogic = "and"
    sort_by: Optional[str] = "sequence_id"

    def filters(self) -> dict[str, Any]:
        """The keyword arguments of ``StoreClient.query_spans`` after the rollout and attempt."""
        return self.model_dump(exclude={"rollout_id", "attempt_id"})


class WorkerQuery(Page):
    status_in: Optional[list[WorkerStatus]] = Field(Query(default=None))
    worker_id_contains: Optional[str] = None
    filter_logic: FilterLogic = "and"


class WaitBody(BaseModel):
    rollout_ids: list[str]
    timeout: Optional[float] = None


class SequenceIdBody(BaseModel):
    rollout_id: str
    attempt_id: str


class UpdateRolloutBody(BaseModel):
    """Only the fields the client set are applied (``model_fields_set``): None is a value to set."""

    input: Any = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    status: Optional[RolloutStatus] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[dict[str, Any]] = None


class UpdateAttemptBody(BaseModel):
    status: Optional[AttemptStatus] = None
    worker_id: Optional[str] = None
    last_heartbeat_time: Optional[float] = None
    metadata: Optional[dict[str, Any]] = None


class UpdateWorkerBody(BaseModel):
    heartbeat_stats: Optional[dict[str, Any]] = None


def page_json(result: PaginatedResult[Any]) -> dict[str, Any]:
    """Upstream's ``PaginatedResult`` JSON: ``items`` (models as JSON), ``limit``, ``offset``, ``total``."""
    return {
        "items": [item.model_dump(mode="json") for item in result.items],
        "limit": result.limit,
        "offset": result.offset,
        "total": result.total,
    }


def check_page(page: Page, model: type[BaseModel]) -> None:
    """Upstream's checks of a page request, with its messages (400 before any work)."""
    if page.sort_by is not None and page.sort_by not in model.model_fields:
        allowed = ", ".join(model.model_fields)
        raise HTTPException(400, f"Invalid sort_by: {page.sort_by}, allowed fields are: {allowed}")
    if page.limit == 0 or page.limit < -1:
        raise HTTPException(400, "Limit must be greater than 0 or -1 for no limit")
    if page.offset < 0:
        raise HTTPException(400, "Offset must be greater than or equal to 0")


def set_or_unset(body: Optional[BaseModel], name: str, *, nullable: bool = True) -> Any:
    """A field the client sent (None included when ``nullable``), else ``UNSET``: only sent fields change."""
    if body is None or name not in body.model_fields_set:
        return UNSET
    value = getattr(body, name)
    if value is None and not nullable:
        raise HTTPException(400, f"{name} is invalid; it cannot be a null value.")
    return value


def as_json(model: Optional[BaseModel]) -> Any:
    return None if model is None else model.model_dump(mode="json")
