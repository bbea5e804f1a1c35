"""Workers: heartbeats on the compacted ``agl.workers`` (runner processes and ``update_worker``), followed on
first use."""

from __future__ import annotations

import time
from typing import Any, Literal, Optional, Sequence, Union

from agl_stream.client.follow import TopicFollower
from agl_stream.client.paging import UNSET, PaginatedResult, Unset, query
from agl_stream.client.store.base import StoreBase
from agl_stream.types import Worker, WorkerStatus


class WorkerStore(StoreBase):
    _workers: dict[str, Worker]
    _workers_follower: Optional[TopicFollower[Worker]]

    async def _worker_view(self) -> dict[str, Worker]:
        if self._workers_follower is None:
            self._workers_follower = TopicFollower(self.settings, "workers", Worker, self._apply_worker, bootstrap=self.bootstrap)
            await self._workers_follower.start()
        return self._workers

    def _apply_worker(self, key: Optional[str], worker: Worker) -> None:
        known = self._workers.get(worker.worker_id)
        if known is None or (worker.last_heartbeat_time or 0.0) >= (known.last_heartbeat_time or 0.0):
            self._workers[worker.worker_id] = worker

    async def query_workers(
        self,
        *,
        status_in: Optional[Sequence[WorkerStatus]] = None,
        worker_id_contains: Optional[str] = None,
        filter_logic: Literal["and", "or"] = "and",
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        """Workers from their heartbeats on the compacted ``agl.workers`` (runner processes and ``update_worker``)."""
        workers = await self._worker_view()
        filters: dict[str, dict[str, Any]] = {}
        if status_in is not None:
            filters["status"] = {"within": list(status_in)}
        if worker_id_contains is not None:
            filters["worker_id"] = {"contains": worker_id_contains}
        return query(list(workers.values()), Worker, filters=filters, filter_logic=filter_logic, sort_by=sort_by,
                     sort_order=sort_order, limit=limit, offset=offset)  # fmt: skip

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        return (await self._worker_view()).get(worker_id)

    async def update_worker(self, worker_id: str, heartbeat_stats: Union[dict[str, Any], Unset] = UNSET) -> Worker:
        """A heartbeat of ``worker_id`` on ``agl.workers`` (stats replaced when given)."""
        known = (await self._worker_view()).get(worker_id)
        worker = known.model_copy() if known is not None else Worker(worker_id=worker_id)
        worker.last_heartbeat_time = time.time()
        if not isinstance(heartbeat_stats, Unset):
            worker.heartbeat_stats = dict(heartbeat_stats)
        await self._producer.send_and_wait(self.settings.topic("workers"), worker, key=worker_id)
        self._apply_worker(worker_id, worker)
        return worker
