"""Rollouts the client's view no longer holds: read from ClickHouse's ``rollouts`` and ``attempts`` tables.

The view (:mod:`agl_stream.client.rollout_view`) keeps live rollouts and a window of recently finished ones;
older finished rollouts are history, answered here. The ``rollouts`` table holds the state machine's latest
snapshot of each rollout, ``attempts`` every attempt's lifecycle events, so a rollout reads back with its
input, config, metadata, status and latest attempt, and its attempts with their times.

What history cannot tell: an earlier attempt that the watchdog closed (no ``finished`` event of its own) reads
``unresponsive`` (it may have been ``timeout``); an attempt's metadata reads as its last event carried it.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional, Protocol, Sequence, Union

from agl_stream.client.clickhouse_reader import ClickHouseReader
from agl_stream.client.sql_ids import in_list, in_lists
from agl_stream.types import Attempt, AttemptedRollout, Rollout, RolloutConfig

#: what an earlier attempt without a ``finished`` event of its own reads (the watchdog closed it)
WATCHDOG_CLOSED = "unresponsive"

_ROLLOUT_COLUMNS = """
RolloutId, Status, Mode, ResourcesId, toUnixTimestamp64Micro(StartTime) AS StartUs,
if(EndTime IS NULL, NULL, toUnixTimestamp64Micro(assumeNotNull(EndTime))) AS EndUs, AttemptId, AttemptSequenceId,
AttemptStatus, WorkerId, Input, Config, Metadata
"""

_ATTEMPT_COLUMNS = """
RolloutId, AttemptId, max(AttemptSequenceId) AS Seq,
toUnixTimestamp64Micro(if(countIf(Kind = 'started') > 0, minIf(Timestamp, Kind = 'started'), min(Timestamp))) AS StartUs,
if(countIf(Kind = 'finished') > 0, toUnixTimestamp64Micro(maxIf(Timestamp, Kind = 'finished')), NULL) AS EndUs,
argMaxIf(Status, Timestamp, Kind = 'finished') AS FinishedStatus, countIf(Kind = 'finished') > 0 AS Finished,
argMax(WorkerId, Timestamp) AS Worker,
if(countIf(Kind = 'heartbeat') > 0, toUnixTimestamp64Micro(maxIf(Timestamp, Kind = 'heartbeat')), NULL) AS HeartbeatUs,
argMax(Metadata, Timestamp) AS LastMetadata
"""

AnyRollout = Union[Rollout, AttemptedRollout]


class RolloutHistory(Protocol):
    async def rollouts(self, rollout_ids: Sequence[str]) -> list[AnyRollout]:
        """The stored rollouts among ``rollout_ids`` (each with its latest attempt once it had one)."""
        ...

    async def matching(self, *, statuses: Optional[Sequence[str]], rollout_ids: Optional[Sequence[str]],
                       id_contains: Optional[str], filter_logic: Literal["and", "or"]) -> list[AnyRollout]:  # fmt: skip
        """Every stored rollout the filters select (upstream's ``query_rollouts`` filters)."""
        ...

    async def attempts(self, rollout_id: str) -> list[Attempt]:
        """Every attempt of the rollout that reported an event, in sequence order."""
        ...

    async def close(self) -> None: ...


def _seconds(micros: Optional[int]) -> Optional[float]:
    return None if micros is None else int(micros) / 1e6


class ClickHouseRolloutHistory(ClickHouseReader):
    """:class:`RolloutHistory` over the sinks' ClickHouse (a server, or the embedded engine's SQL door)."""

    async def rollouts(self, rollout_ids: Sequence[str]) -> list[AnyRollout]:
        found: list[AnyRollout] = []
        for ids in in_lists(rollout_ids):
            found += await self._select(f"RolloutId IN {ids}", {})
        return found

    async def matching(self, *, statuses: Optional[Sequence[str]], rollout_ids: Optional[Sequence[str]],
                       id_contains: Optional[str], filter_logic: Literal["and", "or"]) -> list[AnyRollout]:  # fmt: skip
        params: dict[str, Any] = {}
        fixed: list[str] = []
        if statuses is not None:
            fixed.append(f"Status IN {in_list(list(statuses))}" if statuses else "0")
        if id_contains is not None:
            fixed.append("position(RolloutId, {contains:String}) > 0")
            params["contains"] = id_contains
        joiner = " AND " if filter_logic == "and" else " OR "
        # a long id list is split into bounded chunks (sql_ids); each chunk's query keeps the other filters, so
        # the union of the chunks' answers is the answer, under "and" and "or" alike
        id_conditions: list[Optional[str]] = [None]
        if rollout_ids is not None:
            id_conditions = [f"RolloutId IN {ids}" for ids in in_lists(rollout_ids)] or ["0"]
        found: dict[str, AnyRollout] = {}
        for id_condition in id_conditions:
            conditions = fixed + ([id_condition] if id_condition else [])
            for rollout in await self._select(joiner.join(conditions) or "1", params):
                found[rollout.rollout_id] = rollout
        return list(found.values())

    async def attempts(self, rollout_id: str) -> list[Attempt]:
        rows = await self._attempt_rows("RolloutId = {r:String}", {"r": rollout_id})
        latest = await self._select("RolloutId = {r:String}", {"r": rollout_id}, with_attempts=False)
        latest_attempt = latest[0].attempt if latest and isinstance(latest[0], AttemptedRollout) else None
        return sorted((self._attempt(row, latest_attempt) for row in rows), key=lambda a: a.sequence_id)

    # ------------------------------------------------------------------ rows to models

    async def _select(self, where: str, params: dict[str, Any], *, with_attempts: bool = True) -> list[AnyRollout]:
        columns, rows = await self._query(f"SELECT {_ROLLOUT_COLUMNS} FROM rollouts FINAL WHERE {where}", params)
        records = [dict(zip(columns, row)) for row in rows]
        timing: dict[tuple[str, str], dict[str, Any]] = {}
        if with_attempts and records:
            for ids in in_lists([r["AttemptId"] for r in records if r["AttemptId"]]):
                for row in await self._attempt_rows(f"AttemptId IN {ids}", {}):
                    timing[(row["RolloutId"], row["AttemptId"])] = row
        return [self._rollout(record, timing.get((record["RolloutId"], record["AttemptId"]))) for record in records]

    async def _attempt_rows(self, where: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        columns, rows = await self._query(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE {where} GROUP BY RolloutId, AttemptId", params
        )
        return [dict(zip(columns, row)) for row in rows]

    @staticmethod
    def _rollout(record: dict[str, Any], timing: Optional[dict[str, Any]]) -> AnyRollout:
        rollout = Rollout(
            rollout_id=record["RolloutId"], input=json.loads(record["Input"]) if record["Input"] else None,
            start_time=_seconds(record["StartUs"]), end_time=_seconds(record["EndUs"]), mode=record["Mode"] or None,
            resources_id=record["ResourcesId"] or None, status=record["Status"],
            config=RolloutConfig.model_validate(json.loads(record["Config"])) if record["Config"] else RolloutConfig(),
            metadata=json.loads(record["Metadata"]) if record["Metadata"] else {},
        )  # fmt: skip
        if not record["AttemptId"]:
            return rollout
        attempt = Attempt(
            rollout_id=rollout.rollout_id, attempt_id=record["AttemptId"], sequence_id=max(1, int(record["AttemptSequenceId"])),
            status=record["AttemptStatus"] or "preparing", worker_id=record["WorkerId"] or None,
            start_time=_seconds(timing["StartUs"]) if timing else rollout.start_time,
            end_time=_seconds(timing["EndUs"]) if timing else None,
            last_heartbeat_time=_seconds(timing["HeartbeatUs"]) if timing else None,
            metadata=json.loads(timing["LastMetadata"]) if timing and timing["LastMetadata"] else {},
        )  # fmt: skip
        return AttemptedRollout(**rollout.model_dump(), attempt=attempt)

    @staticmethod
    def _attempt(row: dict[str, Any], latest: Optional[Attempt]) -> Attempt:
        if latest is not None and latest.attempt_id == row["AttemptId"]:
            return latest  # the state machine's status (the watchdog's included) and the same times
        status = row["FinishedStatus"] if row["Finished"] and row["FinishedStatus"] else WATCHDOG_CLOSED
        return Attempt(
            rollout_id=row["RolloutId"], attempt_id=row["AttemptId"], sequence_id=max(1, int(row["Seq"])),
            start_time=_seconds(row["StartUs"]), end_time=_seconds(row["EndUs"]), status=status,
            worker_id=row["Worker"] or None, last_heartbeat_time=_seconds(row["HeartbeatUs"]),
            metadata=json.loads(row["LastMetadata"]) if row["LastMetadata"] else {},
        )  # fmt: skip
