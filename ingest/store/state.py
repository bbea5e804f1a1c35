"""What the front door's routes share: the store client, the span publisher, the sequence allocator and the span
ledger of this replica, and its options. One per app, on ``app.state.front_door``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from fastapi import Request

from agl_stream.client import StoreClient
from agl_stream_ingest.metrics import SPAN_READS
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.publisher import SpanPublisher
from agl_stream_ingest.security import check_token
from agl_stream_ingest.sequence import SequenceAllocator
from agl_stream_ingest.store.ledger import SpanLedger

#: how long a write naming a rollout this replica has not seen yet waits for the state machine to report it
KNOWN_TIMEOUT = 10.0


@dataclass
class FrontDoor:
    store: StoreClient
    publisher: SpanPublisher
    options: IngestOptions
    #: False: every finished attempt is reported without a span count (replicas behind a balancer that may
    #: spread one runner's calls over several; consumers then wait their grace period)
    span_counts: bool = True
    allocator: SequenceAllocator = field(default_factory=SequenceAllocator)
    ledger: SpanLedger = field(default_factory=SpanLedger)

    #: the store's span reads already counted in the metrics, by source
    _span_reads_counted: Counter[str] = field(default_factory=Counter)

    def count_span_reads(self) -> None:
        """Add the span reads since the last call to ``agl_store_span_reads_total`` (exact totals, any interleaving)."""
        for source, total in self.store.span_reads.items():
            new = total - self._span_reads_counted[source]
            if new:
                SPAN_READS.labels(source).inc(new)
                self._span_reads_counted[source] = total

    async def known(self, rollout_id: str, attempt_id: Optional[str] = None) -> None:
        """A rollout handed out by another replica reaches this one's view through the state machine."""
        if not await self.store.wait_until_known(rollout_id, attempt_id, timeout=KNOWN_TIMEOUT):
            what = f"attempt {attempt_id} of rollout {rollout_id}" if attempt_id else f"rollout {rollout_id}"
            raise ValueError(f"{what} not found")


async def front_door(request: Request) -> FrontDoor:
    """The FastAPI dependency every route takes its state from (async: FastAPI runs a plain ``def`` dependency
    in its thread pool, a thread hand-off per request that cost 6% of the front door's CPU)."""
    door: FrontDoor = request.app.state.front_door
    return door


async def authorized(request: Request) -> None:
    """Every ``/v1/agl`` route: the client's token (``AGL_INGEST_TOKEN``), when one is set."""
    door: FrontDoor = request.app.state.front_door
    check_token(request, door.options.token)
