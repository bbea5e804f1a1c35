"""The fault harness's audit and the rollout benchmark's latency query, asked about 30,000 rollout ids.

A run of 4,096+ rollouts ended with ``Code: 62 ... Max query size exceeded``: both named every rollout
id in one query. They now go in bounded chunks (``agl_stream.client.sql_ids``); here three real
rollouts sit in the first, a middle and the last chunk of 30,003 ids, with raw duplicate rows in two
of them, and every figure must come out as for the three alone: rows merged, counts summed.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from agl_stream.client.sql_ids import MAX_IDS_PER_QUERY
from agl_stream.types import Trajectory
from agl_stream_processors.clickhouse import ClickHouse
from tests.benchmarks.bench_rollouts import latency_rows
from tests.benchmarks.workload_agent import TASK_NAME_KEY, make_tasks, plan
from tests.faults.audit import Enqueued, audit
from tests.processors.clickhouse.store import (  # noqa: F401  (ch, store_dsn: fixtures)
    ch,
    insert_records,
    make_attempt_events,
    make_snapshot,
    make_span,
    make_trajectory,
    store_dsn,
)

pytestmark = pytest.mark.integration

MANY = 30_000
ATTEMPT = "at-00000001"


def _span_id(base: int, n: int) -> str:
    return f"{base:08x}{n:08x}"


def _store_rollout(ch: ClickHouse, rid: str, task: dict[str, Any], t0: float, base: int) -> Trajectory:  # noqa: F811
    """What a run leaves for one succeeded rollout of ``task``: its row, the finished attempt, the plan's
    spans (the task name among them) and triplets. Returns the trajectory."""
    p = plan(task)
    snapshot = make_snapshot(rid, updated_at=t0 + 2)
    snapshot = snapshot.model_copy(update={"rollout": snapshot.rollout.model_copy(update={"start_time": t0, "end_time": t0 + 2})})
    insert_records(ch, "rollouts", [snapshot])
    started, finished = make_attempt_events(rid, ATTEMPT, t0=t0)
    insert_records(ch, "attempts", [started, finished.model_copy(update={"span_count": p.spans})])
    spans = [make_span(rid, ATTEMPT, n, span_id=_span_id(base, n),
                       attributes={TASK_NAME_KEY: task["name"]} if n == 2 else {"n": n}) for n in range(1, p.spans + 1)]  # fmt: skip
    insert_records(ch, "spans", spans)
    trajectory = make_trajectory(rid, ATTEMPT, n=p.triplets, reward=p.final_reward)
    insert_records(ch, "triplets", [trajectory])
    return trajectory


@pytest.fixture
def stored(ch: ClickHouse) -> Iterator[tuple[Enqueued, list[str], dict[str, float]]]:  # noqa: F811
    """30,003 enqueued rollouts, 3 of them in the store (first, middle, last); raw duplicates in two chunks."""
    for table in ("spans", "triplets"):  # the raw row counts must not collapse while the test reads them
        ch.command(f"SYSTEM STOP MERGES {ch.database}.{table}")
    tasks = make_tasks(MANY + 3, seed=7)
    unknown = [f"ro-{i:012x}" for i in range(MANY)]
    real = ["ro-00000000f001", "ro-00000000f002", "ro-00000000f003"]
    ids = [real[0], *unknown[: MANY // 2], real[1], *unknown[MANY // 2 :], real[2]]
    enq = Enqueued(tasks=dict(zip(ids, tasks)))
    t0 = time.time() - 60
    starts = {}
    for i, rid in enumerate(real):
        starts[rid] = t0 + 10 * i
        trajectory = _store_rollout(ch, rid, enq.tasks[rid], starts[rid], base=i + 1)
        if i == 1:
            insert_records(ch, "triplets", [trajectory])  # delivered twice: same rows again
    insert_records(ch, "spans", [make_span(real[2], ATTEMPT, 1, span_id=_span_id(3, 1))])  # a span delivered twice
    yield enq, real, starts
    for table in ("spans", "triplets"):
        ch.command(f"SYSTEM START MERGES {ch.database}.{table}")


def test_audit_of_30000_rollout_ids(ch: ClickHouse, stored: tuple[Enqueued, list[str], dict[str, float]]) -> None:  # noqa: F811
    enq, real, _starts = stored
    assert len(enq.tasks) > 20 * MAX_IDS_PER_QUERY
    plans = {rid: plan(enq.tasks[rid]) for rid in real}
    verdict = audit(ch, enq)
    assert [p for p in verdict.problems if not p.endswith("status missing")] == []
    missing = len(enq.tasks) - len(real)
    assert (verdict.enqueued, verdict.succeeded, verdict.failed, verdict.other) == (len(enq.tasks), 3, 0, {"missing": missing})
    assert verdict.spans == sum(p.spans for p in plans.values())  # FINAL rows, summed over the chunks
    assert verdict.triplets == sum(p.triplets for p in plans.values())
    assert (verdict.duplicates, verdict.lost, verdict.superseded) == (0, missing, 0)
    # raw rows minus FINAL rows, per chunk, added up: one span again (last chunk), one trajectory again (middle)
    assert verdict.raw_duplicate_rows == 1 + plans[real[1]].triplets


def test_benchmark_latency_rows_of_30000_rollout_ids(ch: ClickHouse, stored: tuple[Enqueued, list[str], dict[str, float]]) -> None:  # noqa: F811
    enq, real, starts = stored
    rows, last_span_row = latency_rows(ch, list(enq.tasks))
    assert sorted(r[0] for r in rows) == real  # one row per stored rollout, from three different chunks
    for rid, start, end, first_triplet_row, finished, succeeded_row in rows:
        assert (start, end, finished) == pytest.approx((starts[rid], starts[rid] + 2, starts[rid] + 0.5), abs=1e-3)
        assert first_triplet_row and succeeded_row, rid
    assert last_span_row == ch.scalar("SELECT toFloat64(max(InsertedAt)) FROM spans") > 0
    assert latency_rows(ch, []) == ([], 0.0)
