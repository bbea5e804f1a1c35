"""Replay: re-derive triplets from spans stored in ClickHouse with another adapter configuration.

Upstream's store keeps spans only while a run lasts; here every span is in the ``spans`` table, so
a new reward policy, ``agent_match`` or a custom adapter can be tried on past rollouts without
running a single agent again. The adapter is any ``Callable[[list[Span]], list[Triplet]]``; by name
it is built with :func:`agl_stream.adapter.build_adapter` (``tracer``, ``llm_proxy``, a class name,
or ``package.module:Class``).

Replayed trajectories carry ``adapter = "replay:<label>"`` and the decision the ``rollouts`` table
records (``final`` for the attempt that ended its rollout, ``superseded`` for one it moved past), so
a replay published to a topic trains exactly what the live run would. Written to the ``triplets`` table
(default) they sit next to the live rows without replacing them (``Adapter`` is part of the key,
and the saved queries leave ``replay:*`` rows out); published to a topic they flow like live
trajectories. With the embedded engine, stop the sinks first: one process owns the data directory.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from agl_stream.client.sql_ids import array_literal, chunks, in_lists
from agl_stream.types import Span, Trajectory, Triplet
from agl_stream_processors.clickhouse.client import ClickHouse
from agl_stream_processors.clickhouse.columns import ColumnBatch
from agl_stream_processors.clickhouse.rows import TRIPLET_SCHEMA, triplet_rows
from agl_stream_processors.clickhouse.spans import SPAN_COLUMNS, spans_from_arrow
from agl_stream_processors.triplets.decisions import RolloutView, decide

logger = logging.getLogger(__name__)

AdapterFn = Callable[[list[Span]], Any]
AttemptKey = tuple[str, str]
REPLAY_PREFIX = "replay:"
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class ReplayError(ValueError):
    """Bad replay arguments, or an adapter that does not produce triplets."""


def parse_since(text: str, now: Optional[float] = None) -> float:
    """Epoch seconds from ``30m`` / ``2h`` / ``7d`` (ago) or an ISO 8601 time (UTC unless it says otherwise)."""
    match = _RELATIVE.match(text.strip())
    if match:
        return (now if now is not None else time.time()) - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReplayError(f"--since {text!r}: use a duration like 30m, 2h, 7d or an ISO time like 2026-01-31T12:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def load_adapter(spec: str, options: Optional[Mapping[str, Any]] = None) -> AdapterFn:
    """Build the adapter a spec names (imported lazily: replay must not need it to be importable otherwise)."""
    from agl_stream.adapter import build_adapter

    try:
        return build_adapter(spec, options)
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        raise ReplayError(f"cannot build adapter {spec!r}: {exc}") from None


@dataclass(frozen=True)
class Selection:
    """Which attempts to replay: explicit rollouts, attempts whose first span is recent enough, or both."""

    rollout_ids: tuple[str, ...] = ()
    since: Optional[float] = None
    limit: Optional[int] = None


@dataclass
class ReplayReport:
    label: str
    attempts: int = 0
    spans: int = 0
    trajectories: int = 0
    triplets: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # "rollout/attempt" -> adapter error


def select_attempts(ch: ClickHouse, selection: Selection) -> list[AttemptKey]:
    """The selected attempts, the earliest first span first (ties by key), at most ``selection.limit``.

    Explicit rollouts are read in bounded chunks (:mod:`agl_stream.client.sql_ids`); every attempt
    belongs to one rollout, so each chunk's first ``limit`` attempts in the same order, merged and
    cut again, are the first ``limit`` of the whole selection."""
    params: dict[str, Any] = {}
    having = ""
    if selection.since is not None:
        having = "HAVING min(Timestamp) >= fromUnixTimestamp64Micro({since:Int64}, 'UTC')"
        params["since"] = int(selection.since * 1_000_000)
    limit = f"LIMIT {int(selection.limit)}" if selection.limit else ""

    def attempts(where: str) -> list[tuple[int, str, str]]:
        _cols, rows = ch.query_rows(
            f"SELECT toUnixTimestamp64Nano(min(Timestamp)) AS First, RolloutId, AttemptId FROM spans {where} "
            f"GROUP BY RolloutId, AttemptId {having} ORDER BY First, RolloutId, AttemptId {limit}",
            params,
        )
        return [(int(r[0]), r[1], r[2]) for r in rows]

    if not selection.rollout_ids:
        found = attempts("")
    else:
        found = sorted(row for ids in in_lists(selection.rollout_ids) for row in attempts(f"WHERE RolloutId IN {ids}"))
        if selection.limit:
            found = found[: int(selection.limit)]
    return [(rid, aid) for _first, rid, aid in found]


def read_spans(ch: ClickHouse, keys: Sequence[AttemptKey]) -> dict[AttemptKey, list[Span]]:
    """Spans of the given attempts (deduplicated with FINAL), each list in sequence order."""
    grouped: dict[AttemptKey, list[Span]] = {k: [] for k in keys}
    for in_keys in in_lists(tuple(k) for k in keys):  # bounded chunks; an attempt's spans all come in its own
        table = ch.query_arrow(
            f"SELECT {SPAN_COLUMNS} FROM spans FINAL WHERE (RolloutId, AttemptId) IN {in_keys} "
            "ORDER BY RolloutId, AttemptId, SequenceId, Timestamp, SpanId"
        )
        for span in spans_from_arrow(table):
            grouped[(span.rollout_id, span.attempt_id)].append(span)
    return grouped


def read_context(ch: ClickHouse, keys: Sequence[AttemptKey]) -> dict[AttemptKey, dict[str, Any]]:
    """What the trajectory record needs besides triplets: mode, resources, group, status, attempt number."""
    context: dict[AttemptKey, dict[str, Any]] = {}
    for chunk in chunks(tuple(k) for k in keys):  # bounded: see agl_stream.client.sql_ids
        context.update(_read_context(ch, array_literal(chunk)))
    return context


def _read_context(ch: ClickHouse, keys: str) -> dict[AttemptKey, dict[str, Any]]:
    """:func:`read_context` of the attempts ``keys`` names: an array literal of (rollout id, attempt id)."""
    _cols, rows = ch.query_rows(
        f"""
        SELECT k.1 AS rollout_id, k.2 AS attempt_id, r.Mode, r.ResourcesId, t.GroupId, a.Status, a.Seq, a.Finished,
               r.AttemptId, r.AttemptSequenceId, r.Status, r.AttemptStatus
        FROM (SELECT arrayJoin({keys}) AS k) AS s
        LEFT JOIN (SELECT RolloutId, Mode, ResourcesId, AttemptId, AttemptSequenceId, Status, AttemptStatus
                   FROM rollouts FINAL) AS r
               ON r.RolloutId = s.k.1
        LEFT JOIN (SELECT RolloutId, AttemptId, any(GroupId) AS GroupId FROM triplets
                   WHERE Adapter NOT LIKE 'replay:%' GROUP BY RolloutId, AttemptId) AS t
               ON t.RolloutId = s.k.1 AND t.AttemptId = s.k.2
        LEFT JOIN (SELECT RolloutId, AttemptId, argMaxIf(Status, Timestamp, Kind = 'finished') AS Status,
                          max(AttemptSequenceId) AS Seq, maxIf(toFloat64(Timestamp), Kind = 'finished') AS Finished
                   FROM attempts GROUP BY RolloutId, AttemptId) AS a
               ON a.RolloutId = s.k.1 AND a.AttemptId = s.k.2
        """
    )
    return {
        (r[0], r[1]): {
            "mode": r[2] or None,
            "resources_id": r[3] or None,
            "group_id": r[4] or None,
            "status": r[5] or "succeeded",
            "attempt_sequence_id": int(r[6] or 1),
            "finished_at": float(r[7]) if r[7] else None,
            "decision": _decision(r[1], int(r[6] or 1), rollout_attempt=r[8], rollout_sequence=int(r[9] or 0),
                                  rollout_status=r[10], attempt_status=r[11]),
            "rollout_status": r[10] or None,
        }
        for r in rows
    }


def _decision(attempt_id: str, sequence_id: int, *, rollout_attempt: Optional[str], rollout_sequence: int,
              rollout_status: Optional[str], attempt_status: Optional[str]) -> str:  # fmt: skip
    """The state machine's verdict as the ``rollouts`` table records it (the triplet processor's rule)."""
    view = None
    if rollout_status:
        view = RolloutView(rollout_attempt or None, rollout_sequence, rollout_status, attempt_status or None, 0.0)
    found = decide(view, attempt_id, sequence_id)
    return found.decision if found is not None else "undecided"


def _final_reward(spans: list[Span], triplets: list[Triplet]) -> Optional[float]:
    try:
        from agl_stream.adapter import find_final_reward

        return find_final_reward(spans)
    except ImportError:
        rewarded = [t.reward for t in triplets if t.reward is not None]
        return rewarded[-1] if rewarded else None


def replay(
    ch: ClickHouse,
    adapter: AdapterFn,
    *,
    label: str,
    selection: Selection = Selection(),
    chunk: int = 200,
    report: Optional[ReplayReport] = None,
) -> Iterator[Trajectory]:
    """Yield one re-derived trajectory per selected attempt; adapter errors are recorded, not raised."""
    report = report if report is not None else ReplayReport(label)
    keys = select_attempts(ch, selection)
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk]
        spans_by_attempt = read_spans(ch, part)
        context = read_context(ch, part)
        for key in part:
            spans = spans_by_attempt.get(key, [])
            report.attempts += 1
            report.spans += len(spans)
            try:
                triplets = adapter(spans)
            except Exception as exc:  # one attempt's spans break the adapter: record it and go on
                report.failures[f"{key[0]}/{key[1]}"] = f"{type(exc).__name__}: {exc}"
                logger.warning("replay: adapter failed on %s/%s: %r", key[0], key[1], exc)
                continue
            if not isinstance(triplets, list) or not all(isinstance(t, Triplet) for t in triplets):
                raise ReplayError(
                    f"adapter {adapter!r} returned {type(triplets).__name__}, not a list of Triplet; "
                    "replay derives triplets (use a triplet adapter such as tracer or llm_proxy)"
                )
            ctx = context.get(key, {})
            report.trajectories += 1
            report.triplets += len(triplets)
            yield Trajectory(
                rollout_id=key[0],
                attempt_id=key[1],
                attempt_sequence_id=ctx.get("attempt_sequence_id", 1),
                group_id=ctx.get("group_id"),
                mode=ctx.get("mode"),
                resources_id=ctx.get("resources_id"),
                status=ctx.get("status", "succeeded"),
                final_reward=_final_reward(spans, triplets),
                triplets=triplets,
                adapter=f"{REPLAY_PREFIX}{label}",
                span_count=len(spans),
                finished_at=ctx.get("finished_at"),
                metadata={"replayed_at": time.time()},
                decision=ctx.get("decision", "undecided"),
                rollout_status=ctx.get("rollout_status"),
            )


def write_to_table(ch: ClickHouse, trajectories: Iterable[Trajectory], batch_size: int = 500) -> int:
    """Insert replayed trajectories into ``triplets``; returns the rows written."""
    written = 0
    batch = ColumnBatch(TRIPLET_SCHEMA)
    for trajectory in trajectories:
        batch.rows.extend(triplet_rows(trajectory))
        if len(batch) >= batch_size:
            written += ch.insert_arrow("triplets", batch.to_arrow())
            batch = ColumnBatch(TRIPLET_SCHEMA)
    if len(batch):
        written += ch.insert_arrow("triplets", batch.to_arrow())
    return written


async def publish_to_topic(settings: Any, topic: str, trajectories: Iterable[Trajectory]) -> int:
    """Send replayed trajectories to ``topic`` (keyed by rollout id); returns how many were acknowledged."""
    from agl_stream.kafka import RecordProducer

    sent = 0
    async with RecordProducer(settings) as producer:
        futures = [await producer.send(topic, t, key=t.rollout_id) for t in trajectories]
        for future in futures:
            await future
            sent += 1
    return sent
