"""A local, always-current view of the compacted ``agl.resources`` topic.

Records are keyed by ``resources_id``; a second record under the key ``latest`` marks the current
version. Runners resolve a task's resources here (by id, else latest) without asking anyone.
"""

from __future__ import annotations

import time
from typing import Optional

from agl_stream.client.follow import TopicFollower
from agl_stream.config import Settings
from agl_stream.types import ResourcesUpdate

LATEST_KEY = "latest"


class ResourcesNotFound(LookupError):
    """A task names resources that did not show up on ``agl.resources`` in time."""


class ResourceCache:
    def __init__(self, settings: Settings, *, bootstrap: Optional[str] = None) -> None:
        self._by_id: dict[str, ResourcesUpdate] = {}
        self._latest: Optional[ResourcesUpdate] = None
        self._follower = TopicFollower(settings, "resources", ResourcesUpdate, self.apply, bootstrap=bootstrap)

    async def start(self, catch_up_timeout: float = 5.0) -> "ResourceCache":
        await self._follower.start(catch_up_timeout)
        return self

    async def stop(self) -> None:
        await self._follower.stop()

    def apply(self, key: Optional[str], update: ResourcesUpdate) -> None:
        """Fold one record in (also used by writers to see their own updates at once)."""
        known = self._by_id.get(update.resources_id)
        if known is None or update.version >= known.version:
            self._by_id[update.resources_id] = update
        if self._latest is None or update.version >= self._latest.version:
            self._latest = update

    def get(self, resources_id: str) -> Optional[ResourcesUpdate]:
        return self._by_id.get(resources_id)

    def all(self) -> list[ResourcesUpdate]:
        """Every resources id with its latest version, in the order they were first published."""
        return list(self._by_id.values())

    def latest(self) -> Optional[ResourcesUpdate]:
        return self._latest

    @property
    def max_version(self) -> int:
        return max((u.version for u in self._by_id.values()), default=-1)

    async def resolve(self, resources_id: Optional[str], timeout: float = 10.0) -> Optional[ResourcesUpdate]:
        """Resources by id, else the latest; waits up to ``timeout`` for them to arrive (a task can
        reach a runner a moment before the resources its algorithm just published). None: no
        resources were ever published (an agent that needs none)."""
        if resources_id is None:
            return self._latest if self._latest is not None else await self.wait_for_any(timeout)
        deadline = time.monotonic() + timeout
        while (found := self._by_id.get(resources_id)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ResourcesNotFound(f"resources {resources_id!r} not found on the resources topic within {timeout:.1f}s")
            await self._follower.wait_changed(min(remaining, 1.0))
        return found

    async def wait_for_any(self, timeout: float) -> Optional[ResourcesUpdate]:
        deadline = time.monotonic() + timeout
        while self._latest is None and (remaining := deadline - time.monotonic()) > 0:
            await self._follower.wait_changed(min(remaining, 1.0))
        return self._latest


__all__ = ["LATEST_KEY", "ResourceCache", "ResourcesNotFound"]
