"""Follow a compacted topic from the beginning and keep the latest value per key in memory.

Used for ``agl.resources`` (runners resolve resources locally, no request/response) and
``agl.rollouts`` (``wait_for_rollouts``). No consumer group: every follower reads everything.
Records that do not decode are logged and counted (the topic's writer owns dead-lettering them).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Generic, Optional, TypeVar

from pydantic import BaseModel

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class TopicFollower(Generic[M]):
    """Background reader of one topic; ``on_record(key, value)`` is called for each decoded record."""

    def __init__(
        self,
        settings: Settings,
        short_name: str,
        model: type[M],
        on_record: Callable[[Optional[str], M], None],
        *,
        bootstrap: Optional[str] = None,
        poll_timeout: float = 0.2,
        latency_critical: bool = False,
    ) -> None:
        """``latency_critical``: a follower someone waits on (read-your-writes); see :class:`RecordConsumer`."""
        self.settings = settings
        self.topic = settings.topic(short_name)
        self.model = model
        self.on_record = on_record
        self.poll_timeout = poll_timeout
        self._consumer = RecordConsumer(settings, [self.topic], group_id=None, bootstrap=bootstrap,
                                        latency_critical=latency_critical)  # fmt: skip
        self._task: Optional[asyncio.Task[None]] = None
        self._changed = asyncio.Condition()
        self._caught_up = asyncio.Event()
        self.records_rejected = 0
        self.records_applied = 0

    async def start(self, catch_up_timeout: float = 5.0) -> None:
        """Start reading; returns once the first poll comes back empty (caught up) or the timeout passed.

        End offsets are unreliable on the local broker, so "caught up" means "a poll returned nothing".
        """
        if self._task is not None:
            return
        await self._consumer.start()
        self._task = asyncio.create_task(self._follow(), name=f"follow-{self.topic}")
        try:
            await asyncio.wait_for(self._caught_up.wait(), catch_up_timeout)
        except asyncio.TimeoutError:
            logger.warning("%s: still catching up after %.1fs; continuing in the background", self.topic, catch_up_timeout)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self._consumer.stop(commit=False)

    async def wait_changed(self, timeout: float) -> bool:
        """Wait until a new record was applied; False on timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
                return True
            except asyncio.TimeoutError:
                return False

    async def _follow(self) -> None:
        while True:
            try:
                good, bad = await self._consumer.get_decoded(self.model, timeout=self.poll_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broker hiccup: the consumer reconnects by itself; keep following
                logger.warning("%s: read failed (%r); retrying", self.topic, exc)
                await asyncio.sleep(0.5)
                continue
            for rejected in bad:
                self.records_rejected += 1
                logger.error("%s: skipping undecodable record at offset %s: %s", self.topic, rejected.record.offset, rejected.error.reason)
            for decoded in good:
                try:
                    self.on_record(decoded.key, decoded.value)
                    self.records_applied += 1
                except Exception:
                    self.records_rejected += 1
                    logger.exception("%s: applying record at offset %s failed", self.topic, decoded.record.offset)
            if good:
                async with self._changed:
                    self._changed.notify_all()
            elif not bad:
                self._caught_up.set()
