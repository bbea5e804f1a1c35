"""Rollout and attempt reads, from the state machine's snapshots on the compacted ``agl.rollouts``.

The view holds live rollouts and the last finished ones (``store_recent_rollouts``); once it has forgotten
any, what it does not hold is looked up in the history (ClickHouse: :mod:`agl_stream.client.rollout_history`)."""

from __future__ import annotations

import time
from typing import Any, Literal, Optional, Sequence, Union

from agl_stream.client.paging import PaginatedResult, query
from agl_stream.client.rollout_history import RolloutHistory
from agl_stream.client.store.base import StoreBase
from agl_stream.types import TERMINAL_ROLLOUT_STATUSES, Attempt, AttemptedRollout, Rollout, RolloutStatus


class RolloutReads(StoreBase):
    _rollout_history: Optional[RolloutHistory]

    def _history(self) -> RolloutHistory:
        if self._rollout_history is None:
            from agl_stream.client.rollout_history import ClickHouseRolloutHistory

            self._rollout_history = ClickHouseRolloutHistory(self.settings.effective_clickhouse_dsn)
        return self._rollout_history

    async def _from_history(self, rollout_ids: Sequence[str]) -> dict[str, Union[Rollout, AttemptedRollout]]:
        """Those of ``rollout_ids`` the view does not hold, from the history, once the view has forgotten any."""
        missing = [rid for rid in rollout_ids if not self.view.knows(rid)]
        if not missing or not self.view.evicted:
            return {}
        return {r.rollout_id: r for r in await self._history().rollouts(missing)}

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        """The rollout with its latest attempt attached once it has one (``AttemptedRollout``), or None."""
        found = self.view.rollout(rollout_id)
        if found is None:
            found = (await self._from_history([rollout_id])).get(rollout_id)
        return found

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
        # only what the filters can select is built: every filter narrows under "and", and so does a lone one
        narrowing = filter_logic == "and" or (ids is None) + (statuses is None) + (rollout_id_contains is None) >= 2
        items = self.view.rollouts(ids=ids if narrowing else None, statuses=statuses if narrowing else None)
        all_held = narrowing and ids is not None and all(self.view.knows(i) for i in ids)
        if self.view.evicted and not all_held:  # and what the view forgot, from the history (the view's copy wins)
            older = await self._history().matching(statuses=statuses, rollout_ids=ids, id_contains=rollout_id_contains,
                                                   filter_logic=filter_logic)  # fmt: skip
            items += [r for r in older if not self.view.knows(r.rollout_id)]
        return query(items, Rollout, filters=filters, filter_logic=filter_logic, sort_by=sort_by,
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
        attempts = self.view.attempts(rollout_id)
        if not self.view.knows(rollout_id) and self.view.evicted:
            attempts = await self._history().attempts(rollout_id)
        return query(attempts, Attempt, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        latest = self.view.latest_attempt(rollout_id)
        if latest is None and (older := (await self._from_history([rollout_id])).get(rollout_id)) is not None:
            latest = older.attempt if isinstance(older, AttemptedRollout) else None
        return latest

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        """The rollouts among ``rollout_ids`` that reached a terminal status, waiting up to ``timeout`` seconds
        (None: until all are done) for the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # rollouts the view forgot finished long ago: looked up once (their history does not change)
        older = {rid: r for rid, r in (await self._from_history(rollout_ids)).items() if r.status in TERMINAL_ROLLOUT_STATUSES}
        while True:
            done = [
                snap.rollout if snap is not None else Rollout.model_validate(older[rid].model_dump(exclude={"attempt"}))
                for rid in rollout_ids
                if (snap := self.view.matches(rid, lambda s: s.rollout.status in TERMINAL_ROLLOUT_STATUSES)) is not None
                or rid in older
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
