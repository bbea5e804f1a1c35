"""The store front door: upstream Agent Lightning 0.3's store REST API over agl-stream's pipeline.

Upstream deployments run ``agl store`` and point ``LightningStoreClient(url)``, their runners and
``Trainer(strategy={"type": "cs", ...})`` at it. This app serves the same routes (``/v1/agl/...``,
same paths, bodies, status codes and pagination), upstream's OTLP ``/v1/traces`` and health, so
those clients move to agl-stream by changing nothing but the URL they already take.

Every route is a :class:`~agl_stream.client.StoreClient` call: writes become topic records (a 2xx
is sent only once the broker acknowledged them), reads come from the state machine's view and
ClickHouse. Nothing is kept here that another replica would need (the span ledger only refines what
this replica reports), so several replicas can run behind one address.

Errors keep upstream's shapes: 422 for a body that does not validate (FastAPI's), 400
``{"detail": ...}`` for a bad page request, and for what the stream refuses or cannot find
(``error_type`` names the exception: ``UnsupportedOnStream`` says what to use instead), 503 with
``Retry-After`` when the pipeline did not catch up or the broker did not acknowledge (upstream's
client retries 5xx after a health probe), 500 ``{"detail", "error_type"}`` for anything else.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from agl_stream.client import ConsistencyTimeout, SpanReaderUnavailable, StoreClient, UNSET, Unset, UnsupportedOnStream
from agl_stream.config import Settings
from agl_stream.service import add_health_routes, always_healthy
from agl_stream.types import Attempt, NamedResources, ResourcesUpdate, Rollout, Span, Worker
from agl_stream_ingest.http import add_operations
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.stopping import stop_with_manager
from agl_stream_ingest.otlp import app as otlp
from agl_stream_ingest.publisher import PublishError, RecordTooLarge, SpanPublisher
from agl_stream_ingest.security import check_token
from agl_stream_ingest.sequence import SequenceAllocator
from agl_stream_ingest.store.ledger import SpanLedger
from agl_stream_ingest.store.wire import (
    AttemptQuery,
    DequeueBody,
    EnqueueBody,
    Page,
    ResourcesQuery,
    RolloutQuery,
    SequenceIdBody,
    SpanQueryBody,
    StartRolloutBody,
    UpdateAttemptBody,
    UpdateRolloutBody,
    UpdateWorkerBody,
    WaitBody,
    WorkerIdBody,
    WorkerQuery,
    page_json,
)

logger = logging.getLogger(__name__)

SERVER = "store"
AGL = "/v1/agl"
#: how long a write naming a rollout this replica has not seen yet waits for the state machine to report it
KNOWN_TIMEOUT = 10.0
#: how long a dequeue waits for a task: upstream's runners sleep 5 s after an empty answer, so a task
#: still in flight to this replica's consumer should be waited for rather than answered "empty"
DEQUEUE_WAIT = 2.0


def _error(status: int, detail: str, error_type: str, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "error_type": error_type}, status_code=status, headers=headers)


def _check_page(page: Page, model: type[BaseModel]) -> None:
    """Upstream's checks of a page request, with its messages (400 before any work)."""
    if page.sort_by is not None and page.sort_by not in model.model_fields:
        allowed = ", ".join(model.model_fields)
        raise HTTPException(400, f"Invalid sort_by: {page.sort_by}, allowed fields are: {allowed}")
    if page.limit == 0 or page.limit < -1:
        raise HTTPException(400, "Limit must be greater than 0 or -1 for no limit")
    if page.offset < 0:
        raise HTTPException(400, "Offset must be greater than or equal to 0")


def _set_or_unset(body: Optional[BaseModel], name: str, *, nullable: bool = True) -> Any:
    """A field the client sent (None included when ``nullable``), else ``UNSET``: only sent fields change."""
    if body is None or name not in body.model_fields_set:
        return UNSET
    value = getattr(body, name)
    if value is None and not nullable:
        raise HTTPException(400, f"{name} is invalid; it cannot be a null value.")
    return value


def _json(model: Optional[BaseModel]) -> Any:
    return None if model is None else model.model_dump(mode="json")


def create_app(
    settings: Settings,
    options: Optional[IngestOptions] = None,
    store: Optional[StoreClient] = None,
    publisher: Optional[SpanPublisher] = None,
    *,
    span_counts: bool = True,
) -> FastAPI:
    """The front door; its lifespan starts the store client and the span publisher.

    ``span_counts=False`` reports every finished attempt without a span count (consumers wait their
    grace period): for replicas behind a balancer that may spread one runner's calls over several."""
    options = options or IngestOptions()
    store = store or StoreClient(settings, dequeue_poll_timeout=DEQUEUE_WAIT)
    publisher = publisher or SpanPublisher(settings, SERVER, timeout=options.produce_timeout)
    allocator = SequenceAllocator()
    ledger = SpanLedger()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await store.start()
        await publisher.start()
        logger.info("store front door serving upstream's /v1/agl API over %s", settings.kafka_bootstrap)
        try:
            yield
        finally:
            try:
                await publisher.stop()
            finally:
                await store.stop()

    app = FastAPI(title="agl-stream store front door (Agent Lightning store API)", lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # fmt: skip
    app.state.store = store
    add_operations(app, SERVER)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = getattr(exc, "headers", None)
        if request.url.path == "/v1/traces":  # OTLP clients expect google.rpc.Status
            return otlp.status_response(request, exc.status_code, str(exc.detail), headers=headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(UnsupportedOnStream)
    async def unsupported(_request: Request, exc: UnsupportedOnStream) -> Response:
        return _error(400, str(exc), "UnsupportedOnStream")

    @app.exception_handler(ValueError)
    async def refused(_request: Request, exc: ValueError) -> Response:
        return _error(400, str(exc), type(exc).__name__)

    @app.exception_handler(ConsistencyTimeout)
    async def behind(_request: Request, exc: ConsistencyTimeout) -> Response:
        logger.warning("pipeline did not catch up: %s", exc)
        return _error(503, str(exc), "ConsistencyTimeout", headers={"Retry-After": "1"})

    @app.exception_handler(SpanReaderUnavailable)
    async def no_reader(_request: Request, exc: SpanReaderUnavailable) -> Response:
        logger.error("%s", exc)
        return _error(503, str(exc), "SpanReaderUnavailable", headers={"Retry-After": "5"})

    @app.exception_handler(PublishError)
    async def broker_down(_request: Request, exc: PublishError) -> Response:
        return _error(503, str(exc), "PublishError", headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def crashed(_request: Request, exc: Exception) -> Response:
        logger.exception("store front door request failed")
        return _error(500, "Internal server error", type(exc).__name__)

    async def authorized(request: Request) -> None:
        check_token(request, options.token)

    api = APIRouter(prefix=AGL, dependencies=[Depends(authorized)])

    async def known(rollout_id: str, attempt_id: Optional[str] = None) -> None:
        """A rollout handed out by another replica reaches this one's view through the state machine."""
        if not await store.wait_until_known(rollout_id, attempt_id, timeout=KNOWN_TIMEOUT):
            what = f"attempt {attempt_id} of rollout {rollout_id}" if attempt_id else f"rollout {rollout_id}"
            raise ValueError(f"{what} not found")

    # ------------------------------------------------------------------ health and statistics

    add_health_routes(api, always_healthy())

    @api.get("/statistics")
    async def statistics() -> dict[str, Any]:
        return dict(await store.statistics())

    # ------------------------------------------------------------------ rollouts and the queue

    @api.post("/queues/rollouts/enqueue", status_code=201)
    async def enqueue(body: EnqueueBody) -> list[Any]:
        rollouts = await store.enqueue_many_rollouts([r.request() for r in body.rollouts]) if body.rollouts else []
        return [_json(r) for r in rollouts]

    @api.post("/queues/rollouts/dequeue")
    async def dequeue(body: Optional[DequeueBody] = Body(None)) -> list[Any]:
        body = body or DequeueBody()
        if body.limit <= 0:
            return []
        claimed = await store.dequeue_many_rollouts(limit=body.limit, worker_id=body.worker_id)
        for task in claimed:
            ledger.hand_out(task.rollout_id, task.attempt.attempt_id)
        return [_json(t) for t in claimed]

    @api.post("/rollouts", status_code=201)
    async def start_rollout(body: StartRolloutBody) -> Any:
        task = await store.start_rollout(input=body.input, mode=body.mode, resources_id=body.resources_id,
                                         config=body.config, metadata=body.metadata, worker_id=body.worker_id)  # fmt: skip
        ledger.hand_out(task.rollout_id, task.attempt.attempt_id)
        return _json(task)

    async def _query_rollouts(q: RolloutQuery, fields_set: Optional[set[str]] = None) -> dict[str, Any]:
        _check_page(q, Rollout)
        # In a search body, a list the client did not send is "no filter" (upstream's rule).
        status_in = q.status_in if fields_set is None or "status_in" in fields_set else None
        rollout_id_in = q.rollout_id_in if fields_set is None or "rollout_id_in" in fields_set else None
        result = await store.query_rollouts(status_in=status_in, rollout_id_in=rollout_id_in,
                                            rollout_id_contains=q.rollout_id_contains, filter_logic=q.filter_logic,
                                            sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit, offset=q.offset)  # fmt: skip
        return page_json(result)

    @api.get("/rollouts")
    async def query_rollouts(q: RolloutQuery = Depends()) -> dict[str, Any]:
        return await _query_rollouts(q)

    @api.post("/rollouts/search")
    async def search_rollouts(q: RolloutQuery) -> dict[str, Any]:
        return await _query_rollouts(q, q.model_fields_set)

    @api.get("/rollouts/{rollout_id}")
    async def get_rollout(rollout_id: str) -> Any:
        return _json(await store.get_rollout_by_id(rollout_id))

    @api.post("/rollouts/{rollout_id}")
    async def update_rollout(rollout_id: str, body: UpdateRolloutBody = Body(...)) -> Any:
        await known(rollout_id)
        rollout = await store.update_rollout(
            rollout_id, input=_set_or_unset(body, "input"), mode=_set_or_unset(body, "mode"),
            resources_id=_set_or_unset(body, "resources_id"), status=_set_or_unset(body, "status", nullable=False),
            config=_set_or_unset(body, "config", nullable=False), metadata=_set_or_unset(body, "metadata"),
        )  # fmt: skip
        return _json(rollout)

    # ------------------------------------------------------------------ attempts

    @api.post("/rollouts/{rollout_id}/attempts", status_code=201)
    async def start_attempt(rollout_id: str, body: Optional[WorkerIdBody] = Body(None)) -> Any:
        await known(rollout_id)
        task = await store.start_attempt(rollout_id, worker_id=body.worker_id if body else None)
        ledger.hand_out(task.rollout_id, task.attempt.attempt_id)
        return _json(task)

    async def _query_attempts(rollout_id: str, q: AttemptQuery) -> dict[str, Any]:
        _check_page(q, Attempt)
        result = await store.query_attempts(rollout_id, sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit,
                                            offset=q.offset)  # fmt: skip
        return page_json(result)

    @api.get("/rollouts/{rollout_id}/attempts")
    async def query_attempts(rollout_id: str, q: AttemptQuery = Depends()) -> dict[str, Any]:
        return await _query_attempts(rollout_id, q)

    @api.post("/rollouts/{rollout_id}/attempts/search")
    async def search_attempts(rollout_id: str, q: AttemptQuery) -> dict[str, Any]:
        return await _query_attempts(rollout_id, q)

    @api.get("/rollouts/{rollout_id}/attempts/latest")
    async def latest_attempt(rollout_id: str) -> Any:
        return _json(await store.get_latest_attempt(rollout_id))

    @api.post("/rollouts/{rollout_id}/attempts/{attempt_id}")
    async def update_attempt(rollout_id: str, attempt_id: str, body: UpdateAttemptBody = Body(...)) -> Any:
        await known(rollout_id, attempt_id)
        status = _set_or_unset(body, "status", nullable=False)
        metadata = _set_or_unset(body, "metadata", nullable=False)
        count: Any = UNSET
        if status in ("succeeded", "failed"):
            resolved = attempt_id
            if attempt_id == "latest" and (latest := await store.get_latest_attempt(rollout_id)) is not None:
                resolved = latest.attempt_id
            finished = ledger.finish(rollout_id, resolved)
            if not span_counts:
                finished = None
            count = finished.span_count if finished is not None else None
            if finished is not None and finished.final_reward is not None:
                # upstream's runners report no reward: the final one of the spans seen here rides on
                # the finished event (the state machine does not keep it on the attempt)
                metadata = {**({} if isinstance(metadata, Unset) else metadata), **finished.event_metadata()}
        attempt = await store.update_attempt(
            rollout_id, attempt_id, status=status, worker_id=_set_or_unset(body, "worker_id", nullable=False),
            last_heartbeat_time=_set_or_unset(body, "last_heartbeat_time", nullable=False),
            metadata=metadata, span_count=count,
        )  # fmt: skip
        return _json(attempt)

    @api.post("/waits/rollouts")
    async def wait_for_rollouts(body: WaitBody) -> list[Any]:
        done = await store.wait_for_rollouts(rollout_ids=body.rollout_ids, timeout=body.timeout)
        return [_json(r) for r in done]

    # ------------------------------------------------------------------ resources

    @api.get("/resources")
    async def query_resources(q: ResourcesQuery = Depends()) -> dict[str, Any]:
        _check_page(q, ResourcesUpdate)
        result = await store.query_resources(resources_id=q.resources_id, resources_id_contains=q.resources_id_contains,
                                             sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit, offset=q.offset)  # fmt: skip
        return page_json(result)

    @api.post("/resources", status_code=201)
    async def add_resources(resources: NamedResources) -> Any:
        return _json(await store.add_resources(resources))

    @api.get("/resources/latest")
    async def latest_resources() -> Any:
        return _json(await store.get_latest_resources())

    @api.post("/resources/{resources_id}")
    async def update_resources(resources_id: str, resources: NamedResources) -> Any:
        return _json(await store.update_resources(resources_id, resources))

    @api.get("/resources/{resources_id}")
    async def get_resources(resources_id: str) -> Any:
        return _json(await store.get_resources_by_id(resources_id))

    # ------------------------------------------------------------------ spans

    @api.post("/spans", status_code=201)
    async def add_span(span: Span) -> Any:
        await known(span.rollout_id, span.attempt_id)
        if not ledger.is_new(span):
            return None  # upstream answers null for a span it did not add
        try:
            payload = publisher.encode(span)
        except RecordTooLarge as exc:
            raise ValueError(str(exc)) from None
        await publisher.publish([(span.rollout_id, payload)])
        allocator.observe(span.rollout_id, span.attempt_id, span.sequence_id)
        ledger.accepted([span])
        return _json(span)

    async def _query_spans(q: SpanQueryBody) -> dict[str, Any]:
        _check_page(q, Span)
        result = await store.query_spans(q.rollout_id, q.attempt_id, **q.filters())
        return page_json(result)

    @api.get("/spans")
    async def query_spans(q: SpanQueryBody = Depends()) -> dict[str, Any]:
        return await _query_spans(q)

    @api.post("/spans/search")
    async def search_spans(q: SpanQueryBody) -> dict[str, Any]:
        return await _query_spans(q)

    @api.post("/spans/next")
    async def next_sequence_id(body: SequenceIdBody) -> dict[str, int]:
        return {"sequence_id": allocator.next(body.rollout_id, body.attempt_id)}

    # ------------------------------------------------------------------ workers

    async def _query_workers(q: WorkerQuery, fields_set: Optional[set[str]] = None) -> dict[str, Any]:
        _check_page(q, Worker)
        status_in = q.status_in if fields_set is None or "status_in" in fields_set else None
        result = await store.query_workers(status_in=status_in, worker_id_contains=q.worker_id_contains,
                                           filter_logic=q.filter_logic, sort_by=q.sort_by, sort_order=q.sort_order,
                                           limit=q.limit, offset=q.offset)  # fmt: skip
        return page_json(result)

    @api.get("/workers")
    async def query_workers(q: WorkerQuery = Depends()) -> dict[str, Any]:
        return await _query_workers(q)

    @api.post("/workers/search")
    async def search_workers(q: WorkerQuery) -> dict[str, Any]:
        return await _query_workers(q, q.model_fields_set)

    @api.get("/workers/{worker_id}")
    async def get_worker(worker_id: str) -> Any:
        return _json(await store.get_worker_by_id(worker_id))

    @api.post("/workers/{worker_id}")
    async def update_worker(worker_id: str, body: Optional[UpdateWorkerBody] = Body(None)) -> Any:
        stats = _set_or_unset(body, "heartbeat_stats", nullable=False)
        return _json(await store.update_worker(worker_id, heartbeat_stats=stats))

    app.include_router(api)

    # ------------------------------------------------------------------ OTLP (upstream's /v1/traces)

    @app.post("/v1/traces")
    async def export_traces(request: Request) -> Response:
        response, accepted = await otlp.export(request, options, publisher, allocator)
        ledger.accepted(accepted)
        return response

    @app.post("/v1/metrics")
    @app.post("/v1/logs")
    @app.post("/v1/development/profiles")
    async def not_implemented() -> Response:
        return Response(status_code=501)  # upstream's answer for the other OTLP signals

    return app


def app_from_env() -> FastAPI:
    """uvicorn factory: every worker process builds its app from ``AGL_*`` variables."""
    stop_with_manager()
    settings = Settings.from_env()
    return create_app(settings, IngestOptions.from_settings(settings), span_counts=settings.store_span_counts)

