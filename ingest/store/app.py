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
from typing import AsyncIterator, Optional

from fastapi import APIRouter, Depends, FastAPI

from agl_stream.client import StoreClient
from agl_stream.client.span_feed import SpanFeed
from agl_stream.config import Settings
from agl_stream_ingest.http import add_operations
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.publisher import SpanPublisher
from agl_stream_ingest.stopping import stop_with_manager
from agl_stream_ingest.store.errors import add_error_handlers
from agl_stream_ingest.store.routes import attempts, resources, rollouts, service, spans, traces, workers
from agl_stream_ingest.store.state import FrontDoor, authorized

logger = logging.getLogger(__name__)

SERVER = "store"
AGL = "/v1/agl"
#: how long a dequeue waits for a task: upstream's runners sleep 5 s after an empty answer, so a task
#: still in flight to this replica's consumer should be waited for rather than answered "empty"
DEQUEUE_WAIT = 2.0


def recent_spans(settings: Settings) -> Optional[SpanFeed]:
    """The feed of recent rollouts' spans (``AGL_STORE_RECENT_SPANS_MB``; None when 0): query_spans without ClickHouse."""
    if settings.store_recent_spans_mb <= 0:
        return None
    return SpanFeed(settings, max_bytes=settings.store_recent_spans_mb * 1024 * 1024)


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
    # No linger on the producers: each call waits for its records' acknowledgement, so a linger only delays the
    # answer (5 ms of an enqueue's 9 on upstream's benchmark, whose algorithm enqueues a batch one call at a time);
    # calls arriving together still share a request while the one before them is in flight.
    door = FrontDoor(
        store=store or StoreClient(settings, dequeue_poll_timeout=DEQUEUE_WAIT, span_feed=recent_spans(settings),
                                   linger_ms=0),
        publisher=publisher or SpanPublisher(settings, SERVER, timeout=options.produce_timeout, linger_ms=0),
        options=options, span_counts=span_counts,
    )  # fmt: skip

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await door.store.start()
        await door.publisher.start()
        logger.info("store front door serving upstream's /v1/agl API over %s", settings.kafka_bootstrap)
        try:
            yield
        finally:
            try:
                await door.publisher.stop()
            finally:
                await door.store.stop()

    app = FastAPI(title="agl-stream store front door (Agent Lightning store API)", lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # fmt: skip
    app.state.store = door.store
    app.state.front_door = door
    add_operations(app, SERVER)
    add_error_handlers(app)
    api = APIRouter(prefix=AGL, dependencies=[Depends(authorized)])
    for resource in (service, rollouts, attempts, resources, spans, workers):
        api.include_router(resource.router)
    app.include_router(api)
    app.include_router(traces.router)
    return app


def app_from_env() -> FastAPI:
    """uvicorn factory: every worker process builds its app from ``AGL_*`` variables."""
    stop_with_manager()
    settings = Settings.from_env()
    return create_app(settings, IngestOptions.from_settings(settings), span_counts=settings.store_span_counts)

