"""Generate the Grafana dashboard from the saved queries, so the CLI and the panels never drift apart.

Run ``python -m agl_stream_processors.analytics.grafana`` after changing a saved query; a test fails while
``deploy/grafana/dashboards/agl-stream.json`` differs from what this module builds. Panels use the
``grafana-clickhouse-datasource`` plugin (v4 query model); time series wrap the saved SQL in a
``$__timeFilter`` on the query's time column so the dashboard's time picker applies, and query
parameters become dashboard variables (``{rollout_id:String}`` -> ``${rollout_id:sqlstring}``, a
text box). Sections (:mod:`agl_stream_processors.analytics.layout`) are rows. ``agl-stream dashboard``
runs these same panel queries locally (:mod:`agl_stream_processors.analytics.macros`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

from agl_stream_processors.analytics.layout import MORE, SECTIONS, Section
from agl_stream_processors.analytics.macros import grafana_variables, variables_of
from agl_stream_processors.analytics.saved import SavedQuery, SavedQueryError, load_saved_queries
from agl_stream_processors.deploy_files import DEPLOY_DIR

PLUGIN = "grafana-clickhouse-datasource"
DASHBOARD_UID = "agl-stream-overview"
DASHBOARD_PATH = DEPLOY_DIR / "grafana" / "dashboards" / "agl-stream.json"
DATASOURCE = {"type": PLUGIN, "uid": "${datasource}"}
FORMAT_TIME_SERIES, FORMAT_TABLE, FORMAT_TRACE = 0, 1, 3  # the plugin's Format enum
_SIZE = {"timeseries": (12, 8), "table": (12, 8), "stat": (12, 4), "traces": (24, 12)}
_FORMAT = {"timeseries": FORMAT_TIME_SERIES, "traces": FORMAT_TRACE}
_QUERY_TYPE = {"timeseries": "timeseries", "traces": "traces"}


def panel_sql(query: SavedQuery) -> str:
    """The SQL a panel runs: the saved query, time-filtered by the dashboard for time series, with its
    parameters as dashboard variables."""
    sql = query.sql
    if query.panel == "timeseries":
        sql = f"SELECT *\nFROM\n(\n{sql}\n)\nWHERE $__timeFilter({query.time_column})\nORDER BY {query.time_column}"
    return grafana_variables(sql)


def _panel(panel_id: int, query: SavedQuery, x: int, y: int) -> dict[str, Any]:
    width, height = _SIZE[query.panel]
    return {
        "id": panel_id,
        "type": query.panel,
        "title": query.title,
        "description": f"{query.description} (saved query: agl-stream sql --saved {query.name})",
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": "A",
                "datasource": DATASOURCE,
                "editorType": "sql",
                "queryType": _QUERY_TYPE.get(query.panel, "table"),
                "format": _FORMAT.get(query.panel, FORMAT_TABLE),
                "rawSql": panel_sql(query),
                "meta": {"savedQuery": query.name, "columns": list(query.columns)},
            }
        ],
    }


def placed_queries(queries: dict[str, SavedQuery], sections: tuple[Section, ...] = SECTIONS) -> list[tuple[Section, list[SavedQuery]]]:
    """The saved queries of each section: every saved query is one panel, and one the layout does not
    name yet goes to a last section, "More panels", so a new saved query shows up without more work."""
    placed = [name for section in sections for name in section.panels]
    unknown = [n for n in placed if n not in queries]
    twice = sorted({n for n in placed if placed.count(n) > 1})
    if unknown or twice:
        raise SavedQueryError(f"dashboard layout: unknown saved queries {unknown}, placed twice {twice}")
    out = [(section, [queries[n] for n in section.panels]) for section in sections]
    unplaced = tuple(n for n in queries if n not in placed)
    if unplaced:
        out.append((Section(MORE, "More panels", unplaced), [queries[n] for n in unplaced]))
    return out


def build_dashboard(queries: Optional[dict[str, SavedQuery]] = None) -> dict[str, Any]:
    queries = load_saved_queries() if queries is None else queries
    panels: list[dict[str, Any]] = []
    variables: list[str] = []
    panel_id = 0
    y = 0
    for section, members in placed_queries(queries):
        panel_id += 1
        panels.append({"id": panel_id, "type": "row", "title": section.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})  # fmt: skip
        y += 1
        x = row_height = 0
        for query in members:
            width, height = _SIZE[query.panel]
            if x + width > 24:
                x, y, row_height = 0, y + row_height, 0
            panel_id += 1
            panel = _panel(panel_id, query, x, y)
            panels.append(panel)
            variables += variables_of(panel["targets"][0]["rawSql"])
            x += width
            row_height = max(row_height, height)
        y += row_height
    templating = [
        {
            "name": "datasource",
            "label": "ClickHouse",
            "type": "datasource",
            "query": PLUGIN,
            "current": {"text": "agl-clickhouse", "value": "agl-clickhouse"},
        }
    ]
    for name in dict.fromkeys(variables):
        templating.append({"name": name, "label": name.replace("_", " "), "type": "textbox", "query": "",
                           "current": {"text": "", "value": ""}})  # fmt: skip
    return {
        "uid": DASHBOARD_UID,
        "title": "agl-stream: rollouts, rewards, latency",
        "tags": ["agl-stream", "clickhouse"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": templating},
        "annotations": {"list": []},
        "panels": panels,
    }


def render(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    """Write the dashboard JSON (to the path given, or the deploy folder)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DASHBOARD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(build_dashboard()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
