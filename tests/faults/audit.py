"""The audit of a fault run: what reached ClickHouse against the ground truth the workload's tasks define.

Used by the fixed chaos scenarios (``tests/faults/test_chaos*.py``), the nemesis, the broker parity set and
the benchmarks that verify every rollout. chdb allows one process per data directory, so it runs after the
processors stopped (or through a client the caller holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from agl_stream.client.sql_ids import in_lists
from tests.benchmarks.workload_agent import TASK_NAME_KEY, plan


@dataclass
class Enqueued:
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # rollout id -> task
    enqueued_at: dict[str, float] = field(default_factory=dict)  # rollout id -> time.time() at enqueue


@dataclass
class Audit:
    enqueued: int
    succeeded: int
    failed: int
    other: dict[str, int]
    spans: int
    triplets: int
    duplicates: int
    lost: int
    superseded: int  # trajectories of retried attempts that reported late, stored and marked, never trained
    raw_duplicate_rows: int  # physical rows ReplacingMergeTree collapses (at-least-once inserts)
    problems: list[str]

    def line(self, name: str) -> str:
        return (f"[{name}] enqueued={self.enqueued} succeeded={self.succeeded} failed={self.failed} "
                f"spans={self.spans} triplets={self.triplets} superseded={self.superseded} "
                f"duplicates={self.duplicates} lost={self.lost} "
                f"(raw duplicate rows collapsed by the tables: {self.raw_duplicate_rows})")  # fmt: skip


def audit(store: Any, enqueued: Enqueued, *, expect_failed: Sequence[str] = ()) -> Audit:
    """Every enqueued rollout's final status, and the spans and triplets of the attempt that ended it.

    Ground truth comes from the tasks (the agent's plan): an attempt of a task with R rounds and I
    intermediate rewards emits 3R + I + 2 spans with sequence ids 1..n and R triplets. The attempt
    that ended a rollout is the one its ``rollouts`` row names (the state machine's verdict); it must
    have reported ``finished``/``succeeded`` with the plan's span count. Natural keys: a span is
    (AttemptId, SequenceId) - the per-attempt order the runner assigns - and a triplet is (AttemptId,
    TripletIndex). ``duplicates`` counts rows beyond one per natural key (in the deduplicated FINAL
    view: a span emitted twice under different span ids), plus every trainable (``Decision =
    'final'``) triplet of any other attempt of the rollout: training data twice. Other attempts'
    trajectories marked ``superseded`` (a retried attempt that reported late) are expected and
    counted in ``superseded``. ``lost`` counts expected keys without a row, plus rollouts whose task
    name or final reward is missing or wrong. A rollout with two different terminal statuses among the
    ``rollouts`` rows is a problem (rows ReplacingMergeTree merged already are out of sight: best effort). ``store``: a DSN, or a client this process holds.
    """
    from agl_stream_processors.clickhouse import connect

    ids = list(enqueued.tasks)
    problems: list[str] = []
    rollouts: dict[str, tuple[str, str]] = {}
    finished: dict[tuple[str, str], list[Any]] = {}
    span_keys: dict[tuple[str, str], tuple[Any, ...]] = {}
    triplet_keys: dict[tuple[str, str], tuple[Any, ...]] = {}
    names: dict[str, str] = {}
    terminal_states: dict[str, list[str]] = {}
    span_rows_raw = span_rows_final = triplet_rows_raw = triplet_rows_final = 0
    ch = connect(store) if isinstance(store, str) else store  # a DSN, or a client this process already holds
    try:
        # Bounded chunks of rollout ids (agl_stream.client.sql_ids): every row and group below belongs to one
        # rollout, and the chunks partition the ids, so per-chunk rows merge and per-chunk counts add up.
        for in_ids in in_lists(ids):
            rollouts.update({r[0]: (r[1], r[2]) for r in ch.query_rows(
                f"SELECT RolloutId, argMax(Status, UpdatedAt), argMax(AttemptId, UpdatedAt) FROM rollouts "
                f"WHERE RolloutId IN {in_ids} GROUP BY RolloutId")[1]})  # fmt: skip
            # every snapshot row the table has not merged away yet: a rollout must reach one terminal state only
            terminal_states.update({r[0]: sorted(r[1]) for r in ch.query_rows(
                f"SELECT RolloutId, groupUniqArray(Status) FROM rollouts WHERE RolloutId IN {in_ids} "
                f"AND Status IN ('succeeded', 'failed', 'cancelled') GROUP BY RolloutId")[1]})  # fmt: skip
            for rid, aid, status, span_count in ch.query_rows(
                f"SELECT RolloutId, AttemptId, Status, SpanCount FROM attempts FINAL WHERE Kind = 'finished' "
                f"AND RolloutId IN {in_ids}"
            )[1]:
                finished.setdefault((rid, aid), []).append((status, span_count))
            span_keys.update({(r[0], r[1]): (r[2], r[3], r[4]) for r in ch.query_rows(
                f"SELECT RolloutId, AttemptId, count(), uniqExact(SequenceId), max(SequenceId) FROM spans FINAL "
                f"WHERE RolloutId IN {in_ids} GROUP BY RolloutId, AttemptId")[1]})  # fmt: skip
            span_rows_raw += ch.scalar(f"SELECT count() FROM spans WHERE RolloutId IN {in_ids}")
            span_rows_final += ch.scalar(f"SELECT count() FROM spans FINAL WHERE RolloutId IN {in_ids}")
            triplet_keys.update({(r[0], r[1]): (r[2], r[3], r[4], r[5], r[6]) for r in ch.query_rows(
                f"SELECT RolloutId, AttemptId, count(), uniqExact(TripletIndex), any(TripletCount), any(FinalReward), "
                f"groupUniqArray(Decision) FROM triplets FINAL WHERE RolloutId IN {in_ids} "
                f"GROUP BY RolloutId, AttemptId")[1]})  # fmt: skip
            triplet_rows_raw += ch.scalar(f"SELECT count() FROM triplets WHERE RolloutId IN {in_ids}")
            triplet_rows_final += ch.scalar(f"SELECT count() FROM triplets FINAL WHERE RolloutId IN {in_ids}")
            names.update({r[0]: r[1] for r in ch.query_rows(
                f"SELECT RolloutId, any(SpanAttributes['{TASK_NAME_KEY}']) FROM spans FINAL WHERE RolloutId IN {in_ids} "
                f"AND mapContains(SpanAttributes, '{TASK_NAME_KEY}') GROUP BY RolloutId")[1]})  # fmt: skip
    finally:
        if isinstance(store, str):
            ch.close()

    statuses = {rid: status for rid, (status, _aid) in rollouts.items()}
    duplicates = lost = superseded = 0
    counts: dict[str, int] = {}
    for rid in ids:
        status = statuses.get(rid, "missing")
        counts[status] = counts.get(status, 0) + 1
        if len(terminal_states.get(rid, [])) > 1:
            problems.append(f"{rid}: reached several terminal states {terminal_states[rid]}")
        if rid in expect_failed:
            if status != "failed":
                problems.append(f"{rid}: expected failed, got {status}")
            continue
        if status != "succeeded":
            problems.append(f"{rid}: status {status}")
            lost += 1
            continue
        p = plan(enqueued.tasks[rid])
        aid = rollouts[rid][1]
        reports = finished.get((rid, aid), [])
        if not any(status == "succeeded" for status, _ in reports):
            problems.append(f"{rid}: its rollout row names attempt {aid!r}, which reported {reports or 'nothing'}")
            lost += 1
            continue
        span_count = next(count for status, count in reports if status == "succeeded")
        if span_count != p.spans:
            problems.append(f"{rid}: runner reported {span_count} spans, the plan has {p.spans}")
        rows, distinct, top = span_keys.get((rid, aid), (0, 0, 0))
        duplicates += rows - distinct + max(0, distinct - p.spans)
        lost += max(0, p.spans - distinct)
        if top != p.spans or rows != p.spans:
            problems.append(f"{rid}/{aid}: {rows} span rows, {distinct} distinct sequence ids (max {top}), expected {p.spans}")
        trows, tdistinct, tcount, final_reward, decisions = triplet_keys.get((rid, aid), (0, 0, 0, None, []))
        duplicates += trows - tdistinct + max(0, tdistinct - p.triplets)
        lost += max(0, p.triplets - tdistinct)
        if (trows, tdistinct, tcount) != (p.triplets,) * 3:
            problems.append(f"{rid}/{aid}: {trows} triplet rows ({tdistinct} distinct, count {tcount}), expected {p.triplets}")
        if trows and decisions != ["final"]:
            problems.append(f"{rid}/{aid}: the attempt that ended the rollout has decisions {decisions}, expected ['final']")
            lost += 1
        for key in (k for k in triplet_keys if k[0] == rid and k[1] != aid):
            if "final" in triplet_keys[key][4]:
                duplicates += triplet_keys[key][0]
                problems.append(f"{rid}: trainable triplets of another attempt too: {key} {triplet_keys[key][4]}")
            else:
                superseded += 1
        if final_reward is None or not 1.0 <= final_reward <= 2.0 or abs(final_reward - p.final_reward) > 1e-9:
            problems.append(f"{rid}: final reward {final_reward}, expected {p.final_reward}")
            lost += 1
        if names.get(rid) != enqueued.tasks[rid]["name"]:
            problems.append(f"{rid}: task name {names.get(rid)!r} not among its spans")
            lost += 1
    return Audit(
        enqueued=len(ids), succeeded=counts.get("succeeded", 0), failed=counts.get("failed", 0),
        other={k: v for k, v in counts.items() if k not in ("succeeded", "failed")},
        spans=span_rows_final, triplets=triplet_rows_final, duplicates=duplicates, lost=lost, superseded=superseded,
        raw_duplicate_rows=(span_rows_raw - span_rows_final) + (triplet_rows_raw - triplet_rows_final),
        problems=problems,
    )  # fmt: skip




# ---------------------------------------------------------------- the learner's history


@dataclass
class LearnerAudit:
    """The learner's surviving history: what its checkpoints kept across restarts."""

    surviving: list[Any]  # the steps, in order
    steps: list[int]
    policy_versions: list[int]
    trained: dict[str, int]  # rollout id -> times trained in the surviving history
    problems: list[str]

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.trained.values())


def audit_learner(runs: Sequence[tuple[int, Sequence[Any]]]) -> LearnerAudit:
    """Over the learner's surviving (checkpointed) history: steps continuous from 1, policy versions only
    growing, no rollout trained twice.

    ``runs``: per run of the learner, in order, the step its checkpoint resumed it from (0 for a fresh start)
    and the steps it reported (``StepMetrics``: ``step``, ``policy_version``, ``rollout_ids``). What a run
    trained after the step the next run resumed from was lost with it and trained again by the next run.
    """
    surviving: list[Any] = []
    for resumed_from, history in runs:  # each run keeps what the runs before it checkpointed, then adds its own
        surviving = [m for m in surviving if m.step <= resumed_from] + list(history)
    problems: list[str] = []
    steps = [m.step for m in surviving]
    if steps != list(range(1, len(steps) + 1)):
        problems.append(f"steps are not continuous from 1: {steps[:50]}")
    versions = [m.policy_version for m in surviving]
    if any(b <= a for a, b in zip(versions, versions[1:])):
        problems.append(f"policy versions do not only grow: {versions[:50]}")
    trained: dict[str, int] = {}
    for m in surviving:
        for rid in m.rollout_ids:
            trained[rid] = trained.get(rid, 0) + 1
    twice = sorted(r for r, n in trained.items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} rollouts trained more than once: {twice[:20]}")
    return LearnerAudit(surviving, steps, versions, trained, problems)
