"""The dashboard's web app: the page, its static files, and a JSON API that runs the Grafana panels' SQL.

Panels come from the provisioned Grafana dashboard as :func:`build_dashboard` builds it (the same
JSON ``deploy/grafana`` ships): ``/api/layout`` lists its sections and panels, ``/api/panels``
runs the named panels' ``rawSql`` with the Grafana macros expanded (the time range, the
``rollout_id`` variable as a query parameter) and returns their rows.

Token: ``/`` accepts it once as ``?token=`` and answers with an HttpOnly, SameSite=Strict cookie;
the API takes that cookie or ``Authorization: Bearer``. None gives 401, a wrong one 403 (compared in
constant time). Static files carry no data and are public; so is ``/healthz``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from agl_stream.service import TokenVerdict, add_health_routes, always_healthy, presented_token, token_verdict

from agl_stream_processors.analytics.grafana import build_dashboard, placed_queries
from agl_stream_processors.analytics.saved import load_saved_queries
from agl_stream_processors.analytics.macros import MacroError, expand, variables_of
from agl_stream_processors.clickhouse.reader import EngineUnavailable
from agl_stream_processors.dashboard.source import DataSource, query

STATIC = Path(__file__).parent / "static"
COOKIE = "agl_dashboard_token"
_DENIED_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>agl-stream dashboard</title>
<link rel="stylesheet" href="/static/dashboard.css"></head><body class="denied"><main>
<h1>agl-stream dashboard</h1><p>{message}</p>
<p>Open the address <code>agl-stream dashboard</code> (or <code>Trainer.fit</code>) printed: it ends in
<code>?token=...</code>. The token is also in <code>AGL_DASHBOARD_TOKEN</code> when you set one.</p></main></body></html>"""


def panel_catalog() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The Grafana dashboard's sections and panels, and each panel (with its SQL) by saved-query name."""
    dashboard = build_dashboard()
    by_name: dict[str, dict[str, Any]] = {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        target = panel["targets"][0]
        name = target["meta"]["savedQuery"]
        by_name[name] = {
            "name": name,
            "title": panel["title"],
            "description": panel["description"],
            "type": panel["type"],
            "columns": target["meta"]["columns"],
            "sql": target["rawSql"],
            "variables": variables_of(target["rawSql"]),
        }
    sections = [{"key": s.key, "title": s.title, "panels": [by_name[q.name] for q in members]}
                for s, members in placed_queries(load_saved_queries())]  # fmt: skip
    return sections, by_name


def create_app(source: DataSource, token: str, *, refresh_seconds: float = 5.0) -> FastAPI:
    sections, panels = panel_catalog()
    app = FastAPI(title="agl-stream dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    def presented(request: Request) -> Optional[str]:
        return presented_token(request.headers, cookies=request.cookies, cookie=COOKIE)

    def denial(candidate: Optional[str], html: bool = False) -> Optional[Response]:
        verdict = token_verdict(candidate, token)
        if verdict is TokenVerdict.ACCEPTED:
            return None
        status, message = (401, "This dashboard needs its token.") if verdict is TokenVerdict.MISSING else (403, "Wrong token.")
        if html:
            return HTMLResponse(_DENIED_PAGE.format(message=message), status_code=status)
        return JSONResponse({"error": message}, status_code=status)

    add_health_routes(app, always_healthy(), ["/healthz"])

    @app.get("/", include_in_schema=False)
    async def page(request: Request, token_param: Optional[str] = Query(None, alias="token")) -> Response:
        candidate = token_param or presented(request)
        refused = denial(candidate, html=True)
        if refused is not None:
            return refused
        response = FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
        if token_param:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    @app.get("/api/layout")
    async def layout(request: Request) -> Response:
        refused = denial(presented(request))
        if refused is not None:
            return refused
        return JSONResponse({"sections": sections, "refresh_seconds": refresh_seconds, "source": source.describe()})

    @app.get("/api/panels")
    def run_panels(  # sync: FastAPI runs it in a worker thread, off the event loop
        request: Request,
        names: str = Query(..., description="comma-separated saved-query names"),
        start: float = Query(0.0, alias="from", description="epoch seconds (time series)"),
        end: Optional[float] = Query(None, alias="to"),
        rollout_id: Optional[str] = Query(None),
    ) -> Response:
        refused = denial(presented(request))
        if refused is not None:
            return refused
        wanted = [n for n in names.split(",") if n]
        unknown = [n for n in wanted if n not in panels]
        if unknown or not wanted:
            return JSONResponse({"error": f"unknown panel(s) {unknown}; known: {sorted(panels)}"}, status_code=400)
        variables = {"rollout_id": rollout_id} if rollout_id else {}
        until = end if end is not None else time.time() + 60
        results: dict[str, Any] = {}
        try:
            with source.reader() as ch:
                for name in wanted:
                    began = time.perf_counter()
                    try:
                        sql, params = expand(panels[name]["sql"], start, until, variables)
                        results[name] = query(ch, sql, params)
                    except MacroError as exc:
                        results[name] = {"error": str(exc)}
                    except Exception as exc:  # one panel's failure is that panel's message, not the page's
                        results[name] = {"error": " ".join(str(exc).split())[:500]}
                    results[name]["ms"] = round((time.perf_counter() - began) * 1000, 1)
        except EngineUnavailable as exc:
            return JSONResponse({"error": str(exc), "source": source.describe()}, status_code=503)
        return JSONResponse({"panels": results, "source": source.describe(), "now": time.time()})

    return app
