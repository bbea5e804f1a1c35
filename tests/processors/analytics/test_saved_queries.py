"""Saved queries answer the questions they are named after, on a known data set."""

from __future__ import annotations

import pytest

from agl_stream_processors.analytics import SavedQueryError, get_saved_query, load_saved_queries
from agl_stream_processors.analytics.saved import parse_saved_query
from agl_stream_processors.clickhouse import ClickHouse
from tests.processors.clickhouse.store import populate


def _run(ch: ClickHouse, name: str) -> list[dict]:
    query = get_saved_query(name)
    columns, rows = ch.query_rows(query.sql)
    assert tuple(columns) == query.columns
    return [dict(zip(columns, row)) for row in rows]


def test_every_saved_query_returns_its_declared_columns(ch: ClickHouse) -> None:
    populate(ch)
    queries = load_saved_queries()
    assert len(queries) >= 12
    for query in queries.values():
        columns, _rows = ch.query_rows(query.sql)
        assert tuple(columns) == query.columns, query.name


def test_answers_on_known_data(ch: ClickHouse) -> None:
    populate(ch)
    by_version = {r["policy_version"]: r for r in _run(ch, "reward_by_policy_version")}
    assert set(by_version) == {1, 2}
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


def test_malformed_saved_queries_are_rejected() -> None:
    with pytest.raises(SavedQueryError, match="lacks header"):
        parse_saved_query("x", "-- title: T\nSELECT 1")
    with pytest.raises(SavedQueryError, match="time_column"):
        parse_saved_query("x", "-- title: T\n-- description: d\n-- panel: timeseries\n-- columns: a\nSELECT 1 AS a")
    with pytest.raises(SavedQueryError, match="no saved query"):
        get_saved_query("does_not_exist")
