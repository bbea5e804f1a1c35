"""Resources: published to the compacted ``agl.resources`` (under their id and under ``latest``), read from the
:class:`~agl_stream.client.resources.ResourceCache` that follows it."""

from __future__ import annotations

import asyncio
import time
from typing import Literal, Optional

from agl_stream.client.paging import PaginatedResult, query
from agl_stream.client.resources import LATEST_KEY, ResourceCache
from agl_stream.client.store.base import StoreBase
from agl_stream.ids import generate_resources_id
from agl_stream.types import NamedResources, ResourcesUpdate


class ResourceStore(StoreBase):
    resources: ResourceCache

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new set of resources under a new id; it becomes the latest."""
        return await self._publish(generate_resources_id(), resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new version of existing resources; it becomes the latest."""
        return await self._publish(resources_id, resources)

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return self.resources.latest()

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        return self.resources.get(resources_id)

    async def query_resources(
        self,
        *,
        resources_id: Optional[str] = None,
        resources_id_contains: Optional[str] = None,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        """Every resources id with its latest version, in publication order (unless ``sort_by``)."""
        field = {k: v for k, v in (("exact", resources_id), ("contains", resources_id_contains)) if v is not None}
        return query(self.resources.all(), ResourcesUpdate, filters={"resources_id": field} if field else None,
                     sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)  # fmt: skip

    async def _publish(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        now = time.time()
        previous = self.resources.get(resources_id)
        update = ResourcesUpdate.model_validate(
            {
                "resources_id": resources_id,
                "resources": resources,
                "create_time": previous.create_time if previous else now,
                "update_time": now,
                "version": self.resources.max_version + 1,
            }
        )
        topic = self.settings.topic("resources")
        await asyncio.gather(
            await self._producer.send(topic, update, key=resources_id),
            await self._producer.send(topic, update, key=LATEST_KEY),
        )
        self.resources.apply(resources_id, update)
        return update
