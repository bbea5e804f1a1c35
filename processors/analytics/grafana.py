"""Generate the Grafana dashboard from the saved queries, so the CLI and the panels never drift apart.

Run ``python -m agl_stream_processors.analytics.grafana`` after changing a saved query; a test fails while
``deploy/grafana/dashboards/agl-stream.json`` differs from what this module builds. Panels use the
``grafana-clickhouse-datasource`` plugin (v4 query model); time series wrap the saved SQL in a
``$__timeFilter`` on the query's time column so the dashboard's time picker applies.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

from agl_stream_processors.analytics.saved import SavedQuery, load_saved_queries
from agl_stream_processors.deploy_files import DEPLOY_DIR

PLUGIN = "grafana-clickhouse-datasource"
DASHBOARD_UID = "agl-stream-overview"
DASHBOARD_PATH = DEPLOY_DIR / "grafana" / "dashboards" / "agl-stream.json"
DATASOURCE = {"type": PLUGIN, "uid": "${datasource}"}
FORMAT_TIME_SERIES, FORMAT_TABLE = 0, 1  # the plugin's Format enum
_SIZE = {"timeseries": (12, 8), "table": (12, 8), "stat": (12, 4)}


def panel_sql(query: SavedQuery) -> str:
    """The SQL a panel runs: the saved query, time-filtered by the dashboard for time series."""
    if query.panel == "timeseries":
        return f"SELECT *\nFROM\n(\n{query.sql}\n)\nWHERE $__timeFilter({query.time_column})\nORDER BY {query.time_column}"
    return query.sql


def _panel(panel_id: int, query: SavedQuery, x: int, y: int) -> dict[str, Any]:
    width, height = _SIZE[query.panel]
    time_series = query.panel == "timeseries"
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
                "queryType": "timeseries" if time_series else "table",
                "format": FORMAT_TIME_SERIES if time_series else FORMAT_TABLE,
                "rawSql": panel_sql(query),
                "meta": {"savedQuery": query.name, "columns": list(query.columns)},
            }
        ],
    }


def build_dashboard(queries: Optional[dict[str, SavedQuery]] = None) -> dict[str, Any]:
    queries = load_saved_queries() if queries is None else queries
    panels = []
    x = y = 0
    row_height = 0
    for panel_id, query in enumerate(queries.values(), start=1):
        width, height = _SIZE[query.panel]
        if x + width > 24:
            x, y, row_height = 0, y + row_height, 0
        panels.append(_panel(panel_id, query, x, y))
        x += width
        row_height = max(row_height, height)
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
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "ClickHouse",
                    "type": "datasource",
                    "query": PLUGIN,
                    "current": {"text": "agl-clickhouse", "value": "agl-clickhouse"},
                }
            ]
        },
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
