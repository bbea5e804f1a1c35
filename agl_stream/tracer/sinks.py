"""Where exported spans go: Kafka (``agl.spans``) or OTLP/HTTP (the ingest receiver).

Both sinks take span documents (Span-shaped dicts, see :mod:`agl_stream.tracer.convert`) in
batches and run on the exporter's own event loop (never the agent's).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional, Protocol

from aiokafka.partitioner import DefaultPartitioner
from tenacity import RetryCallState

from agl_stream.config import Settings
from agl_stream.kafka import connection_options, is_retriable, start_with_retry
from agl_stream.service import Backoff, retrying
from agl_stream.tracer.convert import SpanDoc, doc_to_span
from agl_stream.tracer.sizing import fit_doc

logger = logging.getLogger(__name__)


class SpanSink(Protocol):
    name: str
    spans_failed: int
    spans_truncated: int

    async def start(self) -> None: ...

    async def write(self, spans: list[SpanDoc]) -> None:
        """Hand spans over for delivery (may wait for room, i.e. backpressure)."""

    async def flush(self) -> None:
        """Return once everything written so far is delivered or has definitively failed."""

    async def stop(self) -> None: ...


class KafkaSpanSink:
    """Produces spans to ``agl.spans`` in record batches built directly (aiokafka ``send_batch``).

    Spans are keyed by rollout id and partitioned exactly like keyed records of every other topic
    (murmur2, aiokafka's and Kafka's default), so a rollout's spans stay co-partitioned with its tasks
    and attempt events. Each partition has one sender that ships whatever accumulated as one batch
    and waits for its acknowledgement (one batch in flight per partition, like the Kafka producer);
    building batches here instead of producing record by record cuts the export thread's cost per
    span several times. At most ``max_pending`` spans wait in the sink (``write`` waits for room:
    backpressure up to the agent's buffer). A batch that fails with a retriable error (broker gone,
    leader moved, timeout) is rebuilt and retried with backoff until ``delivery_timeout``; then its
    spans are counted in ``spans_failed`` and logged. A retried batch may be written twice (every
    sink downstream dedupes by span id).
    """

    name = "kafka"

    def __init__(
        self,
        settings: Settings,
        *,
        bootstrap: Optional[str] = None,
        max_message_bytes: int = 1024 * 1024,
        max_batch_bytes: int = 512 * 1024,
        max_pending: int = 20_000,
        delivery_timeout: float = 120.0,
        start_timeout: float = 30.0,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.topic = settings.topic("spans")
        self.max_message_bytes = max_message_bytes
        self.max_batch_bytes = max_batch_bytes
        self.max_pending = max_pending
        self.delivery_timeout = delivery_timeout
        self.start_timeout = start_timeout
        self._producer: Any = None
        self._partitions: list[int] = []
        self._partitioner = DefaultPartitioner()
        self._queues: dict[int, list[tuple[bytes, bytes]]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._written: dict[int, int] = {}
        self._settled: dict[int, int] = {}
        self._progress: Optional[asyncio.Condition] = None
        self._pending = 0
        self.spans_failed = 0
        self.spans_truncated = 0
        self.spans_delivered = 0
        self.batches_retried = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer

        self._progress = asyncio.Condition()
        self._producer = AIOKafkaProducer(
            **connection_options(self.settings, self.bootstrap),
            max_request_size=self.max_message_bytes,
            max_batch_size=self.max_batch_bytes,
            compression_type=self.settings.kafka_compression,
            acks="all",
            enable_idempotence=self.settings.kafka_idempotence,
            request_timeout_ms=30_000,
            retry_backoff_ms=200,
        )
        await start_with_retry(self._producer, "span exporter", self.start_timeout)
        partitions = await self._producer.partitions_for(self.topic)
        if not partitions:
            raise RuntimeError(f"topic {self.topic} has no partitions (create the topics first)")
        self._partitions = sorted(partitions)

    async def write(self, spans: list[SpanDoc]) -> None:
        assert self._progress is not None
        limit = self.max_message_bytes - 512
        async with self._progress:
            await self._progress.wait_for(lambda: self._pending < self.max_pending)
        for doc in spans:
            try:
                payload, truncated = fit_doc(doc, limit)
            except ValueError as exc:
                self.spans_failed += 1
                logger.error("span %s of attempt %s not exported: %s", doc.get("span_id"), doc.get("attempt_id"), exc)
                continue
            self.spans_truncated += truncated
            key = doc["rollout_id"].encode()
            partition = self._partitioner(key, self._partitions, self._partitions)
            self._queues.setdefault(partition, []).append((key, payload))
            self._written[partition] = self._written.get(partition, 0) + 1
            self._pending += 1
        for partition, queue in self._queues.items():
            sender = self._senders.get(partition)
            if queue and (sender is None or sender.done()):
                self._senders[partition] = asyncio.create_task(self._send_partition(partition))

    async def _send_partition(self, partition: int) -> None:
        """Ship the partition's queue batch by batch until it is empty."""
        queue = self._queues[partition]
        try:
            while queue:
                await self._send_one_batch(partition, queue)
        except Exception as exc:  # never leave spans unsettled: flush() would wait forever
            lost = len(queue)
            del queue[:]
            self.spans_failed += lost
            self._settle(partition, lost)
            logger.error("span sender for %s[%d] failed; %d queued span(s) lost: %r", self.topic, partition, lost, exc)
            async with self._progress:  # type: ignore[union-attr]
                self._progress.notify_all()  # type: ignore[union-attr]

    def _settle(self, partition: int, count: int) -> None:
        self._pending -= count
        self._settled[partition] = self._settled.get(partition, 0) + count

    async def _send_one_batch(self, partition: int, queue: list[tuple[bytes, bytes]]) -> None:
        """Ship the head of ``queue`` as one batch; the records leave the queue once settled."""
        batch = self._producer.create_batch()
        taken = 0
        for key, value in queue:
            if batch.append(timestamp=None, key=key, value=value) is None:
                break
            taken += 1
        if taken == 0:  # every record fits into an empty batch (fit_doc keeps it under the limit)
            raise RuntimeError("a span record does not fit into an empty batch")
        await self._deliver(partition, queue[:taken], batch)
        del queue[:taken]
        self._settle(partition, taken)
        assert self._progress is not None
        async with self._progress:
            self._progress.notify_all()

    async def _deliver(self, partition: int, records: list[tuple[bytes, bytes]], batch: Any) -> None:
        def note(state: RetryCallState) -> None:
            if state.attempt_number == 1:  # one line per batch: a broker outage would flood the agent's log
                error = state.outcome.exception() if state.outcome is not None else None
                logger.warning("span batch to %s[%d] failed (%r); retrying", self.topic, partition, error)
            self.batches_retried += 1

        try:
            async for attempt in retrying(f"span batch to {self.topic}[{partition}]", backoff=Backoff(0.1, 2.0),
                                          timeout=self.delivery_timeout, retry_if=is_retriable, before_sleep=note):  # fmt: skip
                with attempt:
                    if attempt.retry_state.attempt_number > 1:  # a sent batch is spent: build it again
                        batch = self._producer.create_batch()
                        for key, value in records:
                            batch.append(timestamp=None, key=key, value=value)
                    await (await self._producer.send_batch(batch, self.topic, partition=partition))
        except Exception as exc:
            self.spans_failed += len(records)
            logger.error("%d span(s) to %s[%d] could not be delivered: %r", len(records), self.topic, partition, exc)
            return
        self.spans_delivered += len(records)

    async def flush(self) -> None:
        """Wait until every span written so far is acknowledged (or counted failed)."""
        assert self._progress is not None
        target = dict(self._written)
        async with self._progress:
            await self._progress.wait_for(lambda: all(self._settled.get(p, 0) >= n for p, n in target.items()))

    async def stop(self) -> None:
        if self._producer is not None:
            try:
                await asyncio.wait_for(self.flush(), self.delivery_timeout)
            finally:
                for sender in self._senders.values():
                    sender.cancel()
                await self._producer.stop()
                self._producer = None


class OtlpSpanSink:
    """Sends spans as standard OTLP/HTTP protobuf (for agents that cannot reach Kafka).

    The rollout/attempt ids travel as ``agentlightning.*`` resource attributes and the sequence id
    as the span attribute ``agentlightning.span_sequence_id``, which is what the ingest receiver reads.
    """

    name = "otlp"

    def __init__(self, endpoint: str, *, timeout: float = 10.0, headers: Optional[dict[str, str]] = None) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.headers = headers
        self._exporter: Any = None
        self.spans_failed = 0
        self.spans_truncated = 0
        self.spans_delivered = 0

    async def start(self) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self._exporter = OTLPSpanExporter(endpoint=self.endpoint, timeout=self.timeout, headers=self.headers)

    async def write(self, spans: list[SpanDoc]) -> None:
        if not spans:
            return
        from opentelemetry.sdk.trace.export import SpanExportResult

        from agl_stream.tracer.otlp import span_to_readable

        readable = [span_to_readable(doc_to_span(doc)) for doc in spans]
        result = await asyncio.get_running_loop().run_in_executor(None, self._exporter.export, readable)
        if result is SpanExportResult.SUCCESS:
            self.spans_delivered += len(spans)
        else:
            self.spans_failed += len(spans)
            logger.error("OTLP export of %d spans to %s failed", len(spans), self.endpoint)

    async def flush(self) -> None:
        return None  # write() returns only after the receiver answered

    async def stop(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()
