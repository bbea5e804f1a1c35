"""Every Grafana panel's SQL runs on the real schema and returns the columns the panel expects."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from agl_stream_processors.analytics.grafana import DASHBOARD_PATH, PLUGIN, build_dashboard, render
from agl_stream_processors.clickhouse import ClickHouse
from tests.processors.clickhouse.store import populate

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"


def expand_macros(sql: str, start: float, end: float) -> str:
    """The grafana-clickhouse-datasource macros the panels use, expanded the way the plugin does."""
    sql = re.sub(
        r"\$__timeFilter\((\w+)\)", lambda m: f"{m.group(1)} >= toDateTime({int(start)}) AND {m.group(1)} <= toDateTime({int(end)})", sql
    )
    assert "$__" not in sql and "${" not in sql, f"unexpanded macro in {sql}"
    return sql


def test_committed_dashboard_matches_the_saved_queries() -> None:
    assert DASHBOARD_PATH.read_text() == render(build_dashboard()), "run: python -m agl_stream_processors.analytics.grafana"


def test_every_panel_query_returns_the_expected_columns(ch: ClickHouse) -> None:
    populate(ch)
    dashboard = json.loads(DASHBOARD_PATH.read_text())
    now = time.time()
    assert len(dashboard["panels"]) >= 12
    for panel in dashboard["panels"]:
        target = panel["targets"][0]
        assert panel["datasource"]["type"] == PLUGIN and target["editorType"] == "sql"
        columns, rows = ch.query_rows(expand_macros(target["rawSql"], now - 6 * 3600, now + 60))
        assert columns == target["meta"]["columns"], panel["title"]
        if panel["type"] == "timeseries" and target["meta"]["savedQuery"] != "rollout_outcomes_over_time":
            assert rows, f"{panel['title']}: no rows inside the dashboard time range"
    time_series = [p for p in dashboard["panels"] if p["type"] == "timeseries"]
    empty = ch.query_rows(expand_macros(time_series[0]["targets"][0]["rawSql"], 0, 1))[1]
    assert empty == []  # the time filter really filters


def test_provisioning_points_at_the_plugin_and_the_dashboards() -> None:
    datasource = (GRAFANA / "provisioning" / "datasources" / "agl-clickhouse.yaml").read_text()
    assert f"type: {PLUGIN}" in datasource and "uid: agl-clickhouse" in datasource and "defaultDatabase: agl" in datasource
    provider = (GRAFANA / "provisioning" / "dashboards" / "agl-stream.yaml").read_text()
    assert "type: file" in provider
    assert json.loads(DASHBOARD_PATH.read_text())["templating"]["list"][0]["current"]["value"] == "agl-clickhouse"


@pytest.mark.parametrize("sql", ["SELECT * FROM (SELECT 1 AS t) WHERE $__timeFilter(t)"])
def test_macro_expansion_leaves_no_macros(sql: str) -> None:
    assert "toDateTime(0)" in expand_macros(sql, 0, 10)
