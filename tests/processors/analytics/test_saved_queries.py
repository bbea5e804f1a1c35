"""Saved queries answer the questions they are named after, on a known data set."""

from __future__ import annotations

import json

import pytest

from agl_stream_processors.analytics import SavedQueryError, get_saved_query, load_saved_queries
from agl_stream_processors.analytics.saved import parse_saved_query
from agl_stream_processors.clickhouse import ClickHouse
from tests.processors.clickhouse.store import populate


def _params(sql: str, rollout_id: str = "ro-000000000001") -> dict | None:
    return {"rollout_id": rollout_id} if "{rollout_id:String}" in sql else None


def _run(ch: ClickHouse, name: str, rollout_id: str = "ro-000000000001") -> list[dict]:
    query = get_saved_query(name)
    columns, rows = ch.query_rows(query.sql, _params(query.sql, rollout_id))
    assert tuple(columns) == query.columns
    return [dict(zip(columns, row)) for row in rows]


def test_every_saved_query_returns_its_declared_columns(ch: ClickHouse) -> None:
    populate(ch)
    queries = load_saved_queries()
    assert len(queries) >= 12
    for query in queries.values():
        columns, _rows = ch.query_rows(query.sql, _params(query.sql))
        assert tuple(columns) == query.columns, query.name


def test_answers_on_known_data(ch: ClickHouse) -> None:
    populate(ch)
    by_version = {r["policy_version"]: r for r in _run(ch, "reward_by_policy_version")}
    assert set(by_version) == {0, 1, 2}  # 0: the evaluation before training
    assert (by_version[1]["trajectories"], by_version[1]["triplets"], by_version[1]["mean_final_reward"]) == (2, 4, 0.5)

    rates = _run(ch, "rollout_rates")[0]
    assert (rates["rollouts"], rates["in_flight"]) == (6, 1)
    assert rates["success_rate"] == pytest.approx(0.8) and rates["retry_rate"] == pytest.approx(1 / 6)

    outcomes = {r["status"]: r for r in _run(ch, "rollout_outcomes")}
    assert (outcomes["succeeded"]["rollouts"], outcomes["failed"]["retried"]) == (4, 1)

    stages = {r["stage"]: r for r in _run(ch, "stage_latency")}
    assert list(stages) == ["enqueue_to_start", "start_to_finish", "finish_to_triplet_row"]
    assert stages["start_to_finish"]["samples"] == 5
    assert stages["start_to_finish"]["p50_s"] == pytest.approx(0.5)
    assert stages["enqueue_to_start"]["p50_s"] > 0

    failing = _run(ch, "top_failing_tasks")
    assert [(r["failed"], r["last_error"]) for r in failing] == [(1, "ValueError: bad answer")]

    assert _run(ch, "spans_per_rollout_summary")[0]["spans"] == 12
    tokens = {r["policy_version"]: r for r in _run(ch, "token_counts")}
    assert (tokens[1]["prompt_tokens"], tokens[1]["response_tokens"]) == (12, 8)
    assert [r["resources_version"] for r in _run(ch, "reward_by_resources_version")] == [1]

    throughput = _run(ch, "throughput")[0]
    assert throughput["rollouts_per_s_1m"] == pytest.approx(5 / 60) and throughput["spans_per_s_1m"] == pytest.approx(12 / 60)
    assert throughput["rollouts_per_s"] > 0 and throughput["run_seconds"] >= 0
    assert sum(r["spans_per_s"] for r in _run(ch, "throughput_over_time")) * 10 == pytest.approx(12)

    recent = {r["rollout_id"]: r for r in _run(ch, "recent_rollouts")}
    assert len(recent) == 6 and recent["ro-00000000000f"]["status"] == "failed" and recent["ro-0000000000aa"]["spans"] == 0
    assert (recent["ro-000000000001"]["spans"], recent["ro-000000000001"]["final_reward"]) == (3, 1.0)

    (attempt,) = _run(ch, "rollout_attempts", "ro-00000000000f")
    assert (attempt["status"], attempt["error"], attempt["worker_id"]) == ("failed", "ValueError: bad answer", "w-1")
    assert attempt["duration_s"] == pytest.approx(0.5)
    spans = _run(ch, "rollout_spans", "ro-000000000002")
    assert [s["sequenceId"] for s in spans] == [1, 2, 3] and spans[0]["tags"] == [{"key": "gen_ai.request.model", "value": "tiny"}]
    triplets = _run(ch, "rollout_triplets", "ro-000000000003")
    assert [(t["triplet"], t["prompt_token_ids"], t["reward"]) for t in triplets] == [(0, [1, 2, 3], None), (1, [1, 2, 4], 1.0)]
    assert _run(ch, "training_progress")[1]["publish_seconds"] == 0.0

    # task success apart from reward: accuracy and pass@k of the evaluations, per policy version
    accuracy = _run(ch, "accuracy_by_policy_version")
    assert [(r["policy_version"], r["evaluation"], r["items"], r["samples_per_item"], r["answers"]) for r in accuracy] == [
        (0, "before", 2, 2, 4), (2, "after", 2, 2, 4)]  # fmt: skip
    assert [(r["accuracy"], r["pass_at_k"], r["mean_final_reward"]) for r in accuracy] == [(0.25, 0.5, 0.25), (0.75, 1.0, 0.75)]
    assert json.loads(accuracy[1]["reward_parts"]) == {"correct": 0.75, "format": 0.5}
    signal = _run(ch, "learning_signal")
    assert [(r["step"], r["zero_gradient"]) for r in signal] == [(1, 1), (2, 1)]  # populate's steps have no gradient norm

    # every two-call attempt of populate breaks the prefix: its second prompt [1, 2, 4] is not [1, 2, 3] + [7, 8]
    breaks = {r["rollout_id"]: r for r in _run(ch, "prefix_breaks")}
    assert breaks and all(r["call"] == 1 for r in breaks.values())
    third = breaks["ro-000000000003"]
    assert (third["first_difference"], third["expected_length"], third["prompt_length"]) == (2, 5, 3)
    assert (third["expected_token"], third["found_token"]) == (3, 4)
    assert "ro-e0000000000" not in breaks  # one call: nothing to break

    # one row per run, its newest record; a run that trained nothing says why
    runs = _run(ch, "training_runs")
    assert [(r["run_id"], r["status"], r["steps"], r["asked_steps"]) for r in runs] == [
        ("run-flat", "finished", 0, 3), ("run-1", "finished", 2, 2)]  # fmt: skip
    assert runs[0]["shortfall"].startswith("0 learner steps of 3 asked: all 4 groups had equal rewards")
    assert runs[1]["shortfall"] == "" and runs[1]["aggregation"] == "trajectory" and runs[1]["ended"] is not None


def test_malformed_saved_queries_are_rejected() -> None:
    with pytest.raises(SavedQueryError, match="lacks header"):
        parse_saved_query("x", "-- title: T\nSELECT 1")
    with pytest.raises(SavedQueryError, match="time_column"):
        parse_saved_query("x", "-- title: T\n-- description: d\n-- panel: timeseries\n-- columns: a\nSELECT 1 AS a")
    with pytest.raises(SavedQueryError, match="no saved query"):
        get_saved_query("does_not_exist")
