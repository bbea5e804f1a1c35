"""Rollout and attempt reads, from the state machine's snapshots on the compacted ``agl.rollouts``."""

from __future__ import annotations

import time
from typing import Any, Literal, Optional, Sequence, Union

from agl_stream.client.paging import PaginatedResult, query
from agl_stream.client.store.base import StoreBase
from agl_stream.types import TERMINAL_ROLLOUT_STATUSES, Attempt, AttemptedRollout, Rollout, RolloutStatus


class RolloutReads(StoreBase):
    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        """The rollout with its latest attempt attached once it has one (``AttemptedRollout``), or None."""
        return self.view.rollout(rollout_id)

    async def query_rollouts(
        self,
        *,
        status_in: Optional[Sequence[RolloutStatus]] = None,
        rollout_id_in: Optional[Sequence[str]] = None,
        rollout_id_contains: Optional[str] = None,
        filter_logic: Literal["and", "or"] = "and",
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
        status: Optional[Sequence[RolloutStatus]] = None,
        rollout_ids: Optional[Sequence[str]] = None,
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """Rollouts filtered, sorted and paginated as upstream (``status``/``rollout_ids`` are the deprecated aliases)."""
        statuses = status_in if status_in is not None else status
        ids = rollout_id_in if rollout_id_in is not None else rollout_ids
        rollout_filter: dict[str, Any] = {}
        if ids is not None:
            rollout_filter["within"] = list(ids)
        if rollout_id_contains is not None:
            rollout_filter["contains"] = rollout_id_contains
        filters: dict[str, dict[str, Any]] = {}
        if statuses is not None:
            filters["status"] = {"within": list(statuses)}
        if rollout_filter:
            filters["rollout_id"] = rollout_filter
        return query(self.view.rollouts(), Rollout, filters=filters, filter_logic=filter_logic, sort_by=sort_by,
                     sort_order=sort_order, limit=limit, offset=offset)  # fmt: skip

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: Optional[str] = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        """Every attempt of the rollout the state machine reported (each with its last known status)."""
        return query(self.view.attempts(rollout_id), Attempt, sort_by=sort_by, sort_order=sort_order, limit=limit,
                     offset=offset)  # fmt: skip

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        return self.view.latest_attempt(rollout_id)

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        """The rollouts among ``rollout_ids`` that reached a terminal status, waiting up to ``timeout`` seconds
        (None: until all are done) for the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [
                snap.rollout
                for rid in rollout_ids
                if (snap := self.view.matches(rid, lambda s: s.rollout.status in TERMINAL_ROLLOUT_STATUSES)) is not None
            ]
            if len(done) == len(rollout_ids):
                return done
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return done
            await self._rollouts.wait_changed(1.0 if remaining is None else min(remaining, 1.0))

    async def wait_until_known(self, rollout_id: str, attempt_id: Optional[str] = None,
                               timeout: Optional[float] = None) -> bool:  # fmt: skip
        """Wait until this client's view has the rollout (and the attempt, when given); False after ``timeout``.

        For writers that serve other processes (the store front door): a rollout enqueued or dequeued
        through another client reaches this view only once the state machine reported it."""
        deadline = time.monotonic() + (self.consistency_timeout if timeout is None else timeout)

        def known() -> bool:
            if self.view.snapshot(rollout_id) is None:
                return False
            return attempt_id is None or attempt_id == "latest" or self.view.attempt(rollout_id, attempt_id) is not None

        while not known():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self._rollouts.wait_changed(min(remaining, 0.5))
        return True
