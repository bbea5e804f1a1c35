"""Hands spans to ``agl.spans`` and returns only once the broker acknowledged every one of them.

An ingest server answers 200 only after this returns, so "accepted" means "durable in the broker";
when the broker does not acknowledge within ``timeout`` the caller answers 503 and the sender
retries (the OTLP exporters do), which may write a span twice: sinks deduplicate by span id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional, Sequence

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.serialization import encode
from agl_stream.types import Span
from agl_stream_ingest.metrics import PRODUCE_LATENCY, SPANS_ACCEPTED

logger = logging.getLogger(__name__)


class PublishError(RuntimeError):
    """The broker did not acknowledge the spans; nothing can be promised to the client."""


class RecordTooLarge(ValueError):
    """One span is bigger than a broker message may be."""


class SpanPublisher:
    def __init__(self, settings: Settings, server: str, *, timeout: float = 30.0, linger_ms: int = 5,
                 producer: Optional[RecordProducer] = None) -> None:
        self.settings = settings
        self.server = server
        self.timeout = timeout
        self.linger_ms = linger_ms
        self.topic = settings.topic("spans")
        self._producer = producer

    @property
    def producer(self) -> RecordProducer:
        if self._producer is None:
            raise RuntimeError("publisher is not started")
        return self._producer

    async def start(self) -> None:
        # Built here, not in __init__: aiokafka binds to the loop it is created in (the server's).
        if self._producer is None:
            self._producer = RecordProducer(self.settings, delivery_timeout=self.timeout, linger_ms=self.linger_ms)
        await self._producer.start()

    async def stop(self) -> None:
        """Flush what is still in flight, then close the connection."""
        if self._producer is not None:
            await self._producer.stop()

    @property
    def max_record_bytes(self) -> int:
        """Largest encoded span the broker takes (the producer refuses bigger ones up front)."""
        return self.producer.max_request_size - 512

    def encode(self, span: Span) -> bytes:
        """The span's record bytes; raises :class:`RecordTooLarge` above the broker limit."""
        payload = encode(span)
        if len(payload) > self.max_record_bytes:
            raise RecordTooLarge(
                f"span {span.span_id} encodes to {len(payload)} bytes, above the broker limit of "
                f"{self.max_record_bytes} bytes"
            )
        return payload

    async def publish(self, records: Sequence[tuple[str, bytes]]) -> None:
        """Produce encoded spans keyed by rollout id and wait for all acknowledgements."""
        if not records:
            return
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                futures = [await self.producer.send(self.topic, payload, key=key) for key, payload in records]
                await asyncio.gather(*futures)
        except Exception as exc:  # timeouts and broker errors alike: the client must retry
            logger.error("producing %d span(s) to %s failed: %r", len(records), self.topic, exc)
            raise PublishError(f"broker did not acknowledge {len(records)} span(s): {exc!r}") from exc
        PRODUCE_LATENCY.labels(self.server).observe(time.perf_counter() - started)
        SPANS_ACCEPTED.labels(self.server).inc(len(records))
