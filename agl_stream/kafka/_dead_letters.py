"""Dead letters: a rejected record goes to ``agl.dlq`` with the reason and its original bytes.

Everything that rejects a record (the processors, the runner, the task queue, the learner, AIR rules)
builds its letters with :class:`DeadLetterWriter` so nothing is dropped silently: the caller marks the
source record done only when the dead letter is acknowledged (the returned future), and counts per
reason kind are kept for health output. A payload too big to fit in a dead letter is cut to fit and
the reason says so, with the original size (never truncated silently).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Optional

from aiokafka.structs import ConsumerRecord, RecordMetadata

from agl_stream.kafka._producer import RecordProducer
from agl_stream.types import DeadLetter

logger = logging.getLogger(__name__)

#: room left for the envelope and the other fields; base64 inflates the payload by 4/3
_OVERHEAD = 16 * 1024


class DeadLetterWriter:
    """Builds :class:`DeadLetter` records (:meth:`letter`) and produces them to ``topic`` (:meth:`send`), the
    settings' ``topic("dlq")``, on a shared producer (None: build only; the caller sends them its own way)."""

    def __init__(
        self,
        topic: str,
        producer: Optional[RecordProducer],
        processor: str,
        max_request_size: int = 1024 * 1024,
    ) -> None:
        self.topic = topic
        self.producer = producer
        self.processor = processor
        self.max_request_size = max_request_size
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def _max_payload(self) -> int:
        limit = self.producer.max_request_size if self.producer is not None else self.max_request_size
        return max(0, (limit - _OVERHEAD) * 3 // 4)

    def letter(
        self,
        reason: str,
        *,
        record: Optional[ConsumerRecord] = None,
        source_topic: Optional[str] = None,
        payload: Optional[bytes] = None,
        key: Optional[bytes] = None,
        error_type: str = "RecordError",
        kind: Optional[str] = None,
    ) -> DeadLetter:
        """Build (and count) a dead letter without sending it, for processors with their own producer."""
        if record is not None:
            source_topic = source_topic or record.topic
            payload = record.value if payload is None else payload
            key = record.key if key is None else key
        payload = payload or b""
        limit = self._max_payload()
        if len(payload) > limit:
            reason = f"{reason} (payload cut from {len(payload)} to {limit} bytes to fit the broker limit)"
            payload = payload[:limit]
        letter = DeadLetter(
            source_topic=source_topic or "",
            partition=record.partition if record is not None else None,
            offset=record.offset if record is not None else None,
            key=key,
            payload=payload,
            reason=reason,
            error_type=error_type,
            processor=self.processor,
        )
        counter = kind or error_type
        self.counts[counter] += 1
        n = self.counts[counter]
        # one line per kind at first, then every 100th, so a flood of bad input cannot flood the logs
        logger.log(
            logging.WARNING if n == 1 or n % 100 == 0 else logging.DEBUG,
            "%s: dead letter #%d of kind %s from %s[%s@%s]: %s",
            self.processor,
            n,
            counter,
            letter.source_topic,
            letter.partition,
            letter.offset,
            reason,
        )
        return letter

    async def send(
        self,
        reason: str,
        *,
        record: Optional[ConsumerRecord] = None,
        source_topic: Optional[str] = None,
        payload: Optional[bytes] = None,
        key: Optional[bytes] = None,
        error_type: str = "RecordError",
        kind: Optional[str] = None,
    ) -> "asyncio.Future[RecordMetadata]":
        """Queue one dead letter; ``kind`` (default: ``error_type``) groups the health counter."""
        letter = self.letter(
            reason, record=record, source_topic=source_topic, payload=payload, key=key, error_type=error_type, kind=kind
        )
        if self.producer is None:
            raise RuntimeError("this DeadLetterWriter has no producer; use letter() and send it yourself")
        return await self.producer.send(self.topic, letter, key=letter.key)
