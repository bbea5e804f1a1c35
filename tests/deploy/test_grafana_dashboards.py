"""Every Grafana panel's SQL runs on the real schema and returns the columns the panel expects."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from agl_stream_processors.analytics import SavedQueryError, load_saved_queries
from agl_stream_processors.analytics.grafana import DASHBOARD_PATH, PLUGIN, build_dashboard, placed_queries, render
from agl_stream_processors.analytics.macros import MacroError, expand
from agl_stream_processors.clickhouse import ClickHouse
from tests.processors.clickhouse.store import populate

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"


def expand_macros(sql: str, start: float, end: float, rollout_id: str = "ro-000000000001") -> tuple[str, dict]:
    """The grafana-clickhouse-datasource macros and dashboard variables the panels use, expanded the way
    ``agl-stream dashboard`` does (the same code path: the page runs these very panel queries)."""
    return expand(sql, start, end, {"rollout_id": rollout_id})


def test_committed_dashboard_matches_the_saved_queries() -> None:
    assert DASHBOARD_PATH.read_text() == render(build_dashboard()), "run: python -m agl_stream_processors.analytics.grafana"


def test_every_panel_query_returns_the_expected_columns(ch: ClickHouse) -> None:
    populate(ch)
    dashboard = json.loads(DASHBOARD_PATH.read_text())
    now = time.time()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20 and {p["title"] for p in dashboard["panels"] if p["type"] == "row"} >= {"Run overview", "Rollout detail"}
    for panel in panels:
        target = panel["targets"][0]
        assert panel["datasource"]["type"] == PLUGIN and target["editorType"] == "sql"
        columns, rows = ch.query_rows(*expand_macros(target["rawSql"], now - 6 * 3600, now + 60))
        assert columns == target["meta"]["columns"], panel["title"]
        if panel["type"] in ("timeseries", "traces") and target["meta"]["savedQuery"] != "rollout_outcomes_over_time":
            assert rows, f"{panel['title']}: no rows inside the dashboard time range"
        if target["meta"]["savedQuery"] in ("rollout_attempts", "rollout_triplets", "recent_rollouts"):
            assert rows, f"{panel['title']}: no rows for a populated rollout"
    time_series = [p for p in panels if p["type"] == "timeseries"]
    empty = ch.query_rows(*expand_macros(time_series[0]["targets"][0]["rawSql"], 0, 1))[1]
    assert empty == []  # the time filter really filters
    spans = next(p for p in panels if p["type"] == "traces")["targets"][0]["rawSql"]
    assert "${rollout_id:sqlstring}" in spans
    assert ch.query_rows(*expand_macros(spans, 0, now, rollout_id="ro-nope' OR 1=1 --"))[1] == []  # a value, never SQL
    variables = {v["name"]: v["type"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource": "datasource", "rollout_id": "textbox"}


def test_every_saved_query_is_one_panel_of_one_section() -> None:
    queries = load_saved_queries()
    placed = [name for _section, members in placed_queries(queries) for name in (q.name for q in members)]
    assert sorted(placed) == sorted(queries)
    extra = placed_queries({**queries, "extra": dataclasses.replace(queries["workers"], name="extra")})
    assert extra[-1][0].key == "more" and [q.name for q in extra[-1][1]] == ["extra"]  # a new query still shows up
    with pytest.raises(SavedQueryError, match="unknown saved queries"):
        placed_queries({k: v for k, v in queries.items() if k != "workers"})


def test_provisioning_points_at_the_plugin_and_the_dashboards() -> None:
    datasource = (GRAFANA / "provisioning" / "datasources" / "agl-clickhouse.yaml").read_text()
    assert f"type: {PLUGIN}" in datasource and "uid: agl-clickhouse" in datasource and "defaultDatabase: agl" in datasource
    provider = (GRAFANA / "provisioning" / "dashboards" / "agl-stream.yaml").read_text()
    assert "type: file" in provider
    assert json.loads(DASHBOARD_PATH.read_text())["templating"]["list"][0]["current"]["value"] == "agl-clickhouse"


@pytest.mark.parametrize("sql", ["SELECT * FROM (SELECT 1 AS t) WHERE $__timeFilter(t)"])
def test_macro_expansion_leaves_no_macros(sql: str) -> None:
    assert "toDateTime(0)" in expand_macros(sql, 0, 10)[0]
    with pytest.raises(MacroError, match="unknown macro"):
        expand("SELECT $__interval_s", 0, 1)
    with pytest.raises(MacroError, match="needs the variable"):
        expand("SELECT ${other:sqlstring}", 0, 1)
