"""One health implementation, behind the routes each kind of client expects.

A service gives a check (``() -> (healthy, details)``); :func:`add_health_routes` answers it on the paths
its clients probe: 200 with ``{"status": "ok", ...details}`` while healthy, 503 with
``{"status": "failing", ...}`` when not. The paths in use:

- ``/health``: Kubernetes and compose probes (``deploy/``), and the vLLM-compatible inference server;
- ``/v1/agl/health``: upstream's store clients (``agl.LightningStoreClient``), under the store's ``/v1/agl``;
- ``/v1/health``: the training service's client;
- ``/healthz``: the dashboard (a page, not an API);
- ``/ping``: ClickHouse clients probe their server with it; it answers ``Ok.`` as ClickHouse does.

Probes carry no data and take no token: bind to 127.0.0.1 or firewall the port where that matters.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

HealthCheck = Callable[[], "tuple[bool, Mapping[str, Any]]"]


def always_healthy(**details: Any) -> HealthCheck:
    """A check for a service that is healthy whenever it answers (``details`` go in every answer)."""
    return lambda: (True, details)


def health_answer(healthy: bool, details: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """The status code and JSON body of a health answer."""
    return (200 if healthy else 503), {**details, "status": "ok" if healthy else "failing"}


def add_health_routes(app: Any, check: HealthCheck, paths: Iterable[str] = ("/health",), *, ping: bool = False) -> None:
    """Answer ``check`` on each of ``paths`` (GET, outside the OpenAPI schema); ``ping``: ``/ping`` too."""
    from fastapi.responses import JSONResponse, PlainTextResponse

    async def health() -> JSONResponse:
        status, body = health_answer(*check())
        return JSONResponse(body, status_code=status)

    for path in paths:
        app.add_api_route(path, health, methods=["GET"], include_in_schema=False)
    if ping:

        async def ping_route() -> PlainTextResponse:
            healthy, _ = check()
            return PlainTextResponse("Ok.\n" if healthy else "Not ok.\n", status_code=200 if healthy else 503)

        app.add_api_route("/ping", ping_route, methods=["GET"], include_in_schema=False)


def health_app(check: HealthCheck, paths: Iterable[str] = ("/health",)) -> Any:
    """An app that serves only the health routes (a service whose work is not HTTP: the processors)."""
    from fastapi import FastAPI

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    add_health_routes(app, check, paths)
    return app
