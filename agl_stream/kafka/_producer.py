"""Async record producer over aiokafka: envelopes, keyed partitioning, bounded buffering, retries.

Backpressure: at most ``max_in_flight`` records are buffered or in flight at once; ``send`` waits for
a free slot, so a slow or absent broker slows producers down instead of growing memory. Delivery
failures that are retriable (broker gone, leader moving, timeouts) are retried with exponential
backoff until ``delivery_timeout`` has passed; then the record's future fails with the error.
A retried record may be written twice; every sink deduplicates by natural keys.

With a ``transactional_id`` the producer writes in Kafka transactions (``begin_transaction``,
``commit_transaction`` with the consumer offsets they cover): a failed send is not re-sent, it fails
the transaction, which the caller aborts.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Mapping, Optional, Union

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from aiokafka.structs import RecordMetadata
from pydantic import BaseModel

from agl_stream.config import Settings
from agl_stream.kafka._options import connection_options
from agl_stream.serialization import encode
from agl_stream.service import Backoff, retrying

logger = logging.getLogger(__name__)

Key = Union[str, bytes, None]
Value = Union[BaseModel, bytes, None]


class KafkaUnavailable(ConnectionError):
    """The broker could not be reached within the allowed time."""


def _to_bytes(key: Key) -> Optional[bytes]:
    return key.encode() if isinstance(key, str) else key


def is_retriable(exc: BaseException) -> bool:
    if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError, ConnectionError, asyncio.TimeoutError)):
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


async def start_with_retry(client: Any, what: str, timeout: float) -> None:
    """Start an aiokafka client, retrying with backoff while the broker is unreachable."""
    try:
        # aiokafka raises several types for "not reachable yet"
        async for attempt in retrying(f"{what}: connecting to Kafka", backoff=Backoff(0.1, 2.0), timeout=timeout,
                                      retry_if=is_retriable, log=logger):  # fmt: skip
            with attempt:
                await client.start()
    except Exception as exc:
        raise KafkaUnavailable(f"{what}: could not connect to Kafka within {timeout:.0f}s: {exc!r}") from exc


class RecordProducer:
    def __init__(
        self,
        settings: Settings,
        bootstrap: Optional[str] = None,
        *,
        linger_ms: int = 5,
        max_batch_size: int = 512 * 1024,
        max_request_size: int = 1024 * 1024,
        max_in_flight: int = 20_000,
        delivery_timeout: float = 120.0,
        start_timeout: float = 30.0,
        acks: Union[int, str] = "all",
        transactional_id: Optional[str] = None,
        transaction_timeout_ms: int = 15_000,
    ) -> None:
        self.settings = settings
        # transactional: every send belongs to the open transaction, and a failed send fails it (no re-send
        # as a new record: the caller aborts, and its input is redelivered from the committed offsets)
        self.transactional = transactional_id is not None
        self.max_request_size = max_request_size
        self.delivery_timeout = delivery_timeout
        self.start_timeout = start_timeout
        self._slots = asyncio.Semaphore(max_in_flight)
        self.max_in_flight = max_in_flight
        self._producer = AIOKafkaProducer(
            **connection_options(settings, bootstrap),
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            max_request_size=max_request_size,
            compression_type=settings.kafka_compression,
            acks=acks,
            enable_idempotence=self.settings.kafka_idempotence or self.transactional,
            request_timeout_ms=30_000,
            retry_backoff_ms=200,
            transactional_id=transactional_id,
            # a crashed owner's open transaction hides what follows it from read-committed consumers until the
            # coordinator aborts it: keep that short (the broker's default is a minute)
            transaction_timeout_ms=transaction_timeout_ms,
        )
        self._started = False
        self._outstanding: set[asyncio.Future[RecordMetadata]] = set()
        self.records_sent = 0
        self.records_retried = 0
        self.records_failed = 0

    async def start(self) -> "RecordProducer":
        if not self._started:
            await start_with_retry(self._producer, "producer", self.start_timeout)
            self._started = True
        return self

    async def __aenter__(self) -> "RecordProducer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    async def send(
        self,
        topic: str,
        value: Value,
        key: Key = None,
        headers: Optional[Mapping[str, Union[str, bytes]]] = None,
        partition: Optional[int] = None,
    ) -> "asyncio.Future[RecordMetadata]":
        """Buffer one record; the returned future resolves when the broker acknowledged it.

        Waits (backpressure) while ``max_in_flight`` records are outstanding.
        """
        if not self._started:
            raise RuntimeError("producer is not started")
        payload = encode(value) if isinstance(value, BaseModel) else value
        if payload is not None and len(payload) > self.max_request_size - 512:
            raise ValueError(
                f"record of {len(payload)} bytes exceeds the broker message limit ({self.max_request_size} bytes); "
                "chunk or reference large payloads"
            )
        hdrs = [(k, v.encode() if isinstance(v, str) else v) for k, v in (headers or {}).items()]
        await self._slots.acquire()
        outer: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        self._outstanding.add(outer)
        outer.add_done_callback(self._release)
        deadline = time.monotonic() + self.delivery_timeout
        await self._attempt(outer, topic, payload, _to_bytes(key), hdrs, partition, deadline, 0)
        return outer

    async def send_and_wait(self, topic: str, value: Value, key: Key = None, **kwargs: Any) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kwargs))

    async def send_many(self, topic: str, records: list[tuple[Key, Value]]) -> list[RecordMetadata]:
        """Send records and wait until all of them are acknowledged."""
        futures = [await self.send(topic, value, key) for key, value in records]
        return list(await asyncio.gather(*futures))

    async def flush(self, timeout: Optional[float] = None) -> None:
        """Wait until every record sent so far is acknowledged (or failed)."""
        pending = list(self._outstanding)
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def begin_transaction(self) -> None:
        await self._producer.begin_transaction()

    async def commit_transaction(self, offsets: Mapping[Any, int], group_id: str) -> None:
        """Commit the open transaction with the consumer ``offsets`` (next offset to read) of ``group_id``.

        Waits for every record sent in it first: a record still being delivered would otherwise not be in
        the transaction whose offsets claim it."""
        await self.flush(timeout=self.delivery_timeout)
        if offsets:
            await self._producer.send_offsets_to_transaction(dict(offsets), group_id)
        await self._producer.commit_transaction()

    async def abort_transaction(self) -> None:
        await self._producer.abort_transaction()

    async def stop(self) -> None:
        if not self._started:
            return
        try:
            await self.flush(timeout=self.delivery_timeout)
        finally:
            self._started = False
            await self._producer.stop()

    # ---------------------------------------------------------------- internals

    def _release(self, fut: "asyncio.Future[RecordMetadata]") -> None:
        self._outstanding.discard(fut)
        self._slots.release()

    async def _attempt(
        self,
        outer: "asyncio.Future[RecordMetadata]",
        topic: str,
        payload: Optional[bytes],
        key: Optional[bytes],
        headers: list[tuple[str, bytes]],
        partition: Optional[int],
        deadline: float,
        attempt: int,
    ) -> None:
        try:
            inner = await self._producer.send(topic, payload, key=key, headers=headers or None, partition=partition)
        except Exception as exc:
            self._on_failure(outer, exc, topic, payload, key, headers, partition, deadline, attempt)
            return

        def delivered(fut: "asyncio.Future[RecordMetadata]") -> None:
            if outer.done():
                return
            if fut.cancelled():
                outer.cancel()
            elif fut.exception() is not None:
                self._on_failure(outer, fut.exception(), topic, payload, key, headers, partition, deadline, attempt)  # type: ignore[arg-type]
            else:
                self.records_sent += 1
                outer.set_result(fut.result())

        inner.add_done_callback(delivered)

    def _on_failure(
        self,
        outer: "asyncio.Future[RecordMetadata]",
        exc: BaseException,
        topic: str,
        payload: Optional[bytes],
        key: Optional[bytes],
        headers: list[tuple[str, bytes]],
        partition: Optional[int],
        deadline: float,
        attempt: int,
    ) -> None:
        delay = min(0.1 * 2**attempt, 2.0) * (0.5 + random.random())
        if is_retriable(exc) and time.monotonic() + delay < deadline and self._started and not self.transactional:
            self.records_retried += 1
            if attempt == 0:
                logger.warning("produce to %s failed (%r); retrying until the delivery timeout", topic, exc)
            loop = asyncio.get_running_loop()
            loop.call_later(
                delay,
                lambda: loop.create_task(
                    self._attempt(outer, topic, payload, key, headers, partition, deadline, attempt + 1)
                ),
            )
            return
        self.records_failed += 1
        if not outer.done():
            outer.set_exception(exc)
