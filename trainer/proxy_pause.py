"""Pausing the LLM proxies around a weight update, so no agent call straddles two policy versions.

Each replica named in ``proxy_pause.urls`` is asked to close its door (``POST /proxy/pause``): new calls
wait there, and the answer comes once its calls in flight have finished (or ``drain_timeout_s`` passed).
The weights are then published and every replica reopened (``POST /proxy/resume``), whatever happened
in between. A replica that cannot be reached is logged and skipped: training never stops for a proxy,
and a call it serves meanwhile still carries the policy version it was served with.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional

import httpx
from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)


class ProxyPauseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    urls: list[str] = Field(default_factory=list, description="each proxy replica's base URL (not a load balancer)")
    drain_timeout_s: float = Field(default=60.0, gt=0, description="how long a replica waits for its calls in flight")


class ProxyPause:
    """``async with pause.around():`` pauses every replica, and resumes them all on the way out."""

    def __init__(self, config: ProxyPauseConfig, token: Optional[str]) -> None:
        self.config = config
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.failures = 0  #: replicas that could not be paused or resumed (see the log)

    @asynccontextmanager
    async def around(self) -> AsyncIterator[list[dict[str, object]]]:
        """Yields what each paused replica answered (its state: ``drained``, ``in_flight``, ...)."""
        if not self.config.urls:
            yield []
            return
        async with httpx.AsyncClient(timeout=self.config.drain_timeout_s + 10, headers=self.headers) as http:
            answers = await asyncio.gather(*(self._call(http, url, "pause") for url in self.config.urls))
            try:
                yield [a for a in answers if a is not None]
            finally:
                await asyncio.gather(*(self._call(http, url, "resume") for url in self.config.urls))

    async def _call(self, http: httpx.AsyncClient, url: str, action: str) -> Optional[dict[str, object]]:
        params = {"drain_timeout": self.config.drain_timeout_s} if action == "pause" else None
        try:
            response = await http.post(f"{url.rstrip('/')}/proxy/{action}", params=params)
            response.raise_for_status()
            answer: dict[str, object] = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            self.failures += 1
            logger.error("could not %s the LLM proxy at %s (the weight update goes on): %r", action, url, exc)
            return None
        if action == "pause" and not answer.get("drained"):
            logger.warning("the LLM proxy at %s still had %s calls in flight after %g s; publishing anyway", url,
                           answer.get("in_flight"), self.config.drain_timeout_s)  # fmt: skip
        return answer
