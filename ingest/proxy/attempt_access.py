"""Who may write an attempt's routes: a per-attempt key for that attempt, while it runs, or the shared token.

The controller hands each agent a key that names its attempt (``agl_stream.service.mint_attempt_key``). On any
replica the proxy checks the key's signature (the shared ``AGL_ATTEMPT_KEY_SECRET``), that it names the attempt
of the route (or of the ``x-rollout-id``/``x-attempt-id`` headers), and that the attempt has not finished: every
replica follows ``agl.attempts`` from ``window_seconds`` back and remembers up to ``max_finished`` finished
attempts (oldest forgotten first; an attempt older than the window is unknown to it, so its key works again:
the bound is what the memory buys). Between an attempt's ``finished`` event and the replica reading it, its key
still works: the follower's lag, about a fetch wait. The shared token (the trainer, an operator) is not
bound to an attempt. No key is logged or recorded: refusals name the attempt, never the key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Optional

from fastapi import HTTPException, Request

from agl_stream.config import Settings
from agl_stream.service import is_attempt_key, presented_token, verify_attempt_key
from agl_stream.types import AttemptEvent
from agl_stream_ingest.security import check_token

if TYPE_CHECKING:
    from agl_stream.kafka import RecordConsumer

logger = logging.getLogger(__name__)

#: how far back a replica reads agl.attempts when it starts
WINDOW_SECONDS = 24 * 3600.0
#: finished attempts a replica remembers (about 150 bytes each)
MAX_FINISHED = 500_000


class FinishedAttempts:
    """The attempts that finished, as read from ``agl.attempts`` (all partitions, no consumer group)."""

    def __init__(self, settings: Settings, *, window_seconds: float = WINDOW_SECONDS, max_finished: int = MAX_FINISHED) -> None:
        self.settings = settings
        self.window_seconds = window_seconds
        self.max_finished = max_finished
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._task: Optional[asyncio.Task[None]] = None
        self.caught_up = asyncio.Event()  # read to the end offsets it saw at start
        self.unreadable = 0

    def details(self) -> dict[str, Any]:
        """For the proxy's health: how many finished attempts it remembers, whether it has read up to the end
        it saw at start, and how many agl.attempts records it could not decode (their attempts stay unrevoked)."""
        return {"remembered": len(self._finished), "caught_up": self.caught_up.is_set(), "unreadable": self.unreadable}

    def __contains__(self, attempt_id: str) -> bool:
        return attempt_id in self._finished

    def add(self, attempt_id: str) -> None:
        self._finished[attempt_id] = None
        self._finished.move_to_end(attempt_id)
        while len(self._finished) > self.max_finished:
            self._finished.popitem(last=False)

    async def start(self) -> None:
        from agl_stream.kafka import RecordConsumer

        consumer = RecordConsumer(self.settings, [self.settings.topic("attempts")], group_id=None)
        await consumer.start()  # outside a group it reads every partition
        try:
            partitions = list(consumer.raw.assignment())
            if not partitions:
                raise RuntimeError(f"topic {self.settings.topic('attempts')} has no partitions: create the topics "
                                   "first (agl-stream topics create)")  # fmt: skip
            since = int((time.time() - self.window_seconds) * 1000)
            starts = await consumer.raw.offsets_for_times({tp: since for tp in partitions})
            ends = await consumer.raw.end_offsets(partitions)
            for tp in partitions:
                at = starts.get(tp)
                consumer.raw.seek(tp, at.offset if at is not None else ends[tp])
        except BaseException:
            await consumer.stop(commit=False)
            raise
        self._task = asyncio.create_task(self._follow(consumer), name="proxy.finished-attempts")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _follow(self, consumer: "RecordConsumer") -> None:
        try:
            while True:
                good, bad = await consumer.get_decoded(AttemptEvent, timeout=0.5, max_records=5000)
                self.unreadable += len(bad)  # the attempts sink dead-letters them; here they only revoke nothing
                for decoded in good:
                    if decoded.value.kind == "finished":
                        self.add(decoded.value.attempt_id)
                if not self.caught_up.is_set() and await consumer.caught_up():
                    self.caught_up.set()
        finally:
            await consumer.stop(commit=False)


class AttemptAccess:
    """The proxy's one authorization check (see the module doc)."""

    def __init__(self, token: Optional[str], secret: Optional[str], finished: Optional[FinishedAttempts]) -> None:
        self.token = token
        self.secret = secret
        self.finished = finished

    def check(self, request: Request, rollout_id: Optional[str], attempt_id: Optional[str]) -> None:
        """Raise 401/403 unless the request may write (``rollout_id``, ``attempt_id``); None ids: no attempt named."""
        presented = presented_token(request.headers, headers_also=("api-key", "x-api-key"))
        if not is_attempt_key(presented):
            check_token(request, self.token)
            return
        assert presented is not None
        if not self.secret:
            raise HTTPException(401, "per-attempt keys are not enabled on this proxy (set AGL_ATTEMPT_KEY_SECRET)")
        key = verify_attempt_key(self.secret, presented)
        if key is None:
            raise HTTPException(401, "invalid attempt key", headers={"WWW-Authenticate": "Bearer"})
        if (rollout_id, attempt_id) not in ((None, None), (key.rollout_id, key.attempt_id)):
            raise HTTPException(403, f"this key belongs to attempt {key.attempt_id} of rollout {key.rollout_id}; "
                                     f"it cannot write attempt {attempt_id} of rollout {rollout_id}")  # fmt: skip
        if self.finished is not None and key.attempt_id in self.finished:
            raise HTTPException(401, f"attempt {key.attempt_id} of rollout {key.rollout_id} has finished; its key "
                                     "no longer works")  # fmt: skip
