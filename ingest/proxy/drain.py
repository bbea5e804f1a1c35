"""Pause and drain a proxy replica around a weight update: new calls wait, calls in flight finish.

The trainer (or an operator) pauses each replica before it swaps the weights behind it: ``POST /proxy/pause``
makes new model calls wait at the door instead of reaching a model mid-update, and answers once the calls
already in flight have finished (or after ``drain_timeout`` seconds, saying how many are left). ``POST
/proxy/resume`` lets the waiting calls through. ``GET /proxy/state`` reports both counts. A call that waited
longer than ``max_wait`` seconds is answered 503 with ``Retry-After`` (a pause that is never resumed must not
hold agents forever). Upstream v1.0 answers paused calls 429 at once; here they wait, so an agent's SDK
needs no retry for it. Streams count as in flight until their last chunk.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Awaitable, Callable

from fastapi import HTTPException

#: how long a call waits at a paused door before it is answered 503
MAX_WAIT_S = 300.0


class CallGate:
    def __init__(self, max_wait: float = MAX_WAIT_S) -> None:
        self.max_wait = max_wait
        self.in_flight = 0
        self.waiting = 0
        self.paused_since: float | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Condition()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def state(self) -> dict[str, object]:
        return {"paused": self.paused, "in_flight": self.in_flight, "waiting": self.waiting,
                "paused_seconds": round(time.monotonic() - self.paused_since, 3) if self.paused_since else None}  # fmt: skip

    async def enter(self) -> None:
        """Wait while paused (up to ``max_wait``), then count the call as in flight."""
        if self.paused:
            self.waiting += 1
            try:
                await asyncio.wait_for(self._open.wait(), self.max_wait)
            except asyncio.TimeoutError:
                raise HTTPException(503, f"the proxy is paused for a weight update (waited {self.max_wait:g} s)",
                                    headers={"Retry-After": "5"}) from None  # fmt: skip
            finally:
                self.waiting -= 1
        self.in_flight += 1

    async def leave(self) -> None:
        self.in_flight -= 1
        async with self._idle:
            self._idle.notify_all()

    async def pause(self, drain_timeout: float) -> dict[str, object]:
        """Close the door; return once nothing is in flight (or ``drain_timeout`` passed) with the state."""
        if not self.paused:
            self._open.clear()
            self.paused_since = time.monotonic()
        async with self._idle:
            try:
                await asyncio.wait_for(self._idle.wait_for(lambda: self.in_flight == 0), drain_timeout)
            except asyncio.TimeoutError:
                pass
        return {**self.state(), "drained": self.in_flight == 0}

    def resume(self) -> dict[str, object]:
        self._open.set()
        self.paused_since = None
        return self.state()


async def released_after(body: AsyncIterator[bytes], leave: Callable[[], Awaitable[None]]) -> AsyncIterator[bytes]:
    """A streamed body that leaves the gate after its last chunk (or when the client hangs up)."""
    try:
        async for chunk in body:
            yield chunk
    finally:
        try:
            closer = getattr(body, "aclose", None)
            if closer is not None:
                await closer()  # its own clean-up first (the proxy records a call the client hung up on)
        finally:
            await leave()
