"""``dequeue_rollout`` on a stream: claim tasks from ``agl.tasks`` as a member of the runners' consumer group.

A hand-written runner is one more consumer in the group ``agl-runners`` (runner processes are the
others): Kafka assigns it partitions of ``agl.tasks``, and each task it takes is *claimed* with the
runners' protocol (:mod:`agl_stream.kafka.claim`: its ``started`` event acknowledged, then its
offset committed) before it is returned, so no other runner runs it and a crash before the claim
leaves it to the group.

Joining the group takes a moment (a rebalance), so the first call may return nothing yet; after
that a call waits at most ``poll_timeout`` for work. A member that stops asking would keep its
partitions' tasks from every other runner, so the queue leaves the group after ``idle_seconds``
without a call (it rejoins on the next one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from agl_stream.config import Settings
from agl_stream.kafka import DeadLetterWriter, Decoded, RecordConsumer, RecordProducer
from agl_stream.kafka.claim import claim_record, is_preclaimed
from agl_stream.types import AttemptedRollout, AttemptEvent

logger = logging.getLogger(__name__)

#: the shortest fetch a dequeue call gets once it holds the consumer (see ``TaskQueue.dequeue``)
MIN_FETCH_SECONDS = 0.25


class TaskQueue:
    def __init__(
        self,
        settings: Settings,
        producer: RecordProducer,
        *,
        bootstrap: Optional[str] = None,
        group_id: Optional[str] = None,
        poll_timeout: float = 0.5,
        idle_seconds: float = 30.0,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.bootstrap = bootstrap
        self.group_id = group_id or settings.group("runners")  # the runner processes' group
        self.poll_timeout = poll_timeout
        self.idle_seconds = idle_seconds
        self._consumer: Optional[RecordConsumer] = None
        self._lock = asyncio.Lock()
        self._last_call = 0.0
        self._idle_task: Optional[asyncio.Task[None]] = None

    async def dequeue(self, limit: int, worker_id: Optional[str]) -> list[AttemptedRollout]:
        """Claim up to ``limit`` tasks (FIFO per partition); fewer, or none, when the queue has no more now.

        Only the fetch is serialized (one consumer); the claims of the fetched tasks run concurrently
        with other calls' fetches and claims, so many callers (the store front door serves every
        upstream runner through one client) are not queued behind each other's acknowledgements. A
        call waits at most ``poll_timeout`` in all, time spent waiting for the consumer included."""
        if limit <= 0:
            return []
        deadline = time.monotonic() + self.poll_timeout
        fetched: list[Decoded[AttemptedRollout]] = []
        async with self._lock:
            self._last_call = time.monotonic()
            # a call that waited for the lock still gets a short fetch of its own: records in flight to
            # the consumer arrive within one fetch round, and an empty answer costs an upstream runner 5 s
            deadline = max(deadline, time.monotonic() + min(self.poll_timeout, MIN_FETCH_SECONDS))
            consumer = await self._ensure_consumer()
            while len(fetched) < limit:
                remaining = max(0.0, deadline - time.monotonic())
                good, bad = await consumer.get_decoded(AttemptedRollout, timeout=remaining, max_records=limit - len(fetched))
                for rejected in bad:
                    await self._dead_letter(consumer, rejected.record, rejected.error.reason, type(rejected.error).__name__,
                                            worker_id)  # fmt: skip
                for decoded in good:
                    if is_preclaimed(decoded.headers):  # start_rollout/start_attempt: its writer runs it
                        consumer.done(decoded.record)
                        continue
                    fetched.append(decoded)
                if (not good and not bad) or time.monotonic() >= deadline:
                    break
        results = await asyncio.gather(*(self._claim(consumer, decoded, worker_id) for decoded in fetched))
        claimed = [task for task in results if task is not None]
        if len(fetched) < limit:
            await consumer.commit()  # skipped records (pre-claimed, dead-lettered) need not be seen again
        self._last_call = time.monotonic()
        return claimed

    async def _claim(self, consumer: RecordConsumer, decoded: Decoded[AttemptedRollout],
                     worker_id: Optional[str]) -> Optional[AttemptedRollout]:  # fmt: skip
        task = decoded.value
        started_at = time.time()
        event = AttemptEvent(
            kind="started", rollout_id=task.rollout_id, attempt_id=task.attempt.attempt_id,
            attempt_sequence_id=task.attempt.sequence_id, worker_id=worker_id, mode=task.mode,
            resources_id=task.resources_id, metadata=dict(task.metadata), timestamp=started_at,
        )  # fmt: skip
        topic = self.settings.topic("attempts")

        async def report() -> None:
            await self.producer.send_and_wait(topic, event, key=task.rollout_id)

        if not await claim_record(consumer, decoded.record, report, consumer.commit, f"attempt {task.attempt.attempt_id}",
                                  decoded.tenure):  # fmt: skip
            logger.info("task %s moved to another runner before it was claimed", task.rollout_id)
            return None
        attempt = task.attempt.model_copy(update={"status": "preparing", "worker_id": worker_id, "start_time": started_at})
        return task.model_copy(update={"status": "preparing", "attempt": attempt})

    async def _dead_letter(self, consumer: RecordConsumer, record: object, reason: str, error_type: str,
                           worker_id: Optional[str]) -> None:  # fmt: skip
        writer = DeadLetterWriter(self.settings.topic("dlq"), self.producer, f"store-client:{worker_id or 'dequeue'}")
        logger.error("task record at offset %s rejected: %s", record.offset, reason)  # type: ignore[attr-defined]
        await (await writer.send(reason, record=record, error_type=error_type))  # type: ignore[arg-type]
        consumer.done(record)  # type: ignore[arg-type]

    async def _ensure_consumer(self) -> RecordConsumer:
        if self._consumer is None:
            self._consumer = RecordConsumer(
                self.settings, [self.settings.topic("tasks")], self.group_id, self.bootstrap,
                max_poll_interval_ms=max(300_000, int(self.idle_seconds * 2000)),
                latency_critical=True,  # a dequeue waits on it
                claims=True,
            )  # fmt: skip
            await self._consumer.start()
            if self._idle_task is None:
                self._idle_task = asyncio.create_task(self._leave_when_idle(), name="agl-dequeue-idle")
        return self._consumer

    async def _leave_when_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self.idle_seconds, 1.0))
            async with self._lock:
                if self._consumer is not None and time.monotonic() - self._last_call > self.idle_seconds:
                    logger.info("no dequeue for %.0fs: leaving the runners' group", self.idle_seconds)
                    consumer, self._consumer = self._consumer, None
                    await consumer.stop(commit=True)

    async def stop(self) -> None:
        task, self._idle_task = self._idle_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop(commit=True)
