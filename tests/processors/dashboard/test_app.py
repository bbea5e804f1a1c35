"""The dashboard app on a known data set: every Grafana panel answers, the token is required, loopback by default."""

from __future__ import annotations

import inspect
import time

import pytest
from fastapi.testclient import TestClient

from agl_stream.config import Settings
from agl_stream_processors.analytics.grafana import build_dashboard
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.dashboard import cli
from agl_stream_processors.dashboard.app import COOKIE, create_app
from agl_stream_processors.dashboard.source import DataSource
from tests.processors.clickhouse.store import populate

pytestmark = pytest.mark.integration
TOKEN = "dash-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(ch: ClickHouse, store_dsn: str) -> TestClient:
    populate(ch)
    return TestClient(create_app(DataSource(store_dsn), TOKEN, refresh_seconds=2))


def test_every_grafana_panel_answers_with_its_columns(client: TestClient) -> None:
    grafana = {p["targets"][0]["meta"]["savedQuery"]: p for p in build_dashboard()["panels"] if p["type"] != "row"}
    layout = client.get("/api/layout", headers=BEARER).json()
    listed = {p["name"]: p for s in layout["sections"] for p in s["panels"]}
    assert set(listed) == set(grafana) and layout["refresh_seconds"] == 2
    assert all(listed[n]["sql"] == grafana[n]["targets"][0]["rawSql"] for n in listed)  # the very SQL Grafana runs
    now = time.time()
    answer = client.get("/api/panels", headers=BEARER,
                        params={"names": ",".join(listed), "from": now - 3600, "to": now + 60, "rollout_id": "ro-000000000002"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    panels = answer.json()["panels"]
    for name, result in panels.items():
        assert "error" not in result, (name, result)
        assert result["columns"] == listed[name]["columns"], name
    assert panels["rollout_rates"]["rows"] == [[6, 1, 0.8, 0.2, 0.0, pytest.approx(1 / 6)]]
    spans = [dict(zip(panels["rollout_spans"]["columns"], r)) for r in panels["rollout_spans"]["rows"]]
    assert [s["sequenceId"] for s in spans] == [1, 2, 3] and spans[0]["tags"] == [{"key": "gen_ai.request.model", "value": "tiny"}]
    started = dict(zip(panels["recent_rollouts"]["columns"], panels["recent_rollouts"]["rows"][0]))["started"]
    assert abs(started / 1000 - now) < 3600  # instants travel as epoch milliseconds
    assert panels["rollout_attempts"]["rows"] and panels["rollout_triplets"]["rows"]


def test_a_panel_needing_a_rollout_says_so_and_unknown_panels_are_refused(client: TestClient) -> None:
    answer = client.get("/api/panels", headers=BEARER, params={"names": "rollout_spans,rollout_rates"}).json()["panels"]
    assert "rollout_id" in answer["rollout_spans"]["error"] and answer["rollout_rates"]["rows"]
    assert client.get("/api/panels", headers=BEARER, params={"names": "nope"}).status_code == 400


def test_the_page_and_the_api_need_the_token(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/static/dashboard.js").status_code == 200  # code, no data
    for path in ("/", "/api/layout", "/api/panels?names=rollout_rates"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 403, path
    assert client.get("/?token=wrong").status_code == 403
    page = client.get(f"/?token={TOKEN}")
    assert page.status_code == 200 and 'id="view"' in page.text
    assert page.headers["set-cookie"].startswith(f"{COOKIE}={TOKEN}") and "HttpOnly" in page.headers["set-cookie"]
    assert client.get("/api/layout").status_code == 200  # the cookie the page set
    client.cookies.clear()
    client.cookies.set(COOKIE, "stale")
    assert client.get("/api/layout").status_code == 403


def test_the_command_binds_loopback_by_default() -> None:
    """Its flags default to None, so the settings decide: loopback, and a random token, unless AGL_DASHBOARD_* say."""
    defaults = {name: param.default.default for name, param in inspect.signature(cli.dashboard).parameters.items()}
    assert defaults["host"] is None and defaults["token"] is None
    settings = Settings.from_env(env={})
    assert settings.dashboard_host == "127.0.0.1" and settings.dashboard_token is None


def test_an_owned_engine_is_a_503_with_the_reason(settings: Settings) -> None:
    """A store nobody can open reads as one line in the page's banner, not a crash."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    dsn = settings.effective_clickhouse_dsn
    owner = subprocess.Popen([sys.executable, "-m", "tests.processors.clickhouse.engine_owner", dsn], cwd=root,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        client = TestClient(create_app(DataSource(dsn), TOKEN))
        answer = client.get("/api/panels", headers=BEARER, params={"names": "rollout_rates"})
        assert answer.status_code == 503 and "owned by process" in answer.json()["error"]
    finally:
        assert owner.stdin is not None
        owner.stdin.close()
        owner.wait(30)


async def test_a_server_dsn_works_the_same(settings: Settings) -> None:
    """An http(s):// DSN goes through clickhouse-connect's HTTP transport; the SQL door speaks that protocol,
    so it stands in for a ClickHouse server here (a real server runs with AGL_TEST_CLICKHOUSE_URL)."""
    import asyncio

    from agl_stream_processors.clickhouse import connect, migrate
    from agl_stream_processors.clickhouse.door import SqlDoor

    writer = connect(settings.effective_clickhouse_dsn)
    migrate(writer)
    populate(writer)
    door = await SqlDoor(writer.target).start()
    try:
        assert door.address is not None
        source = DataSource(door.address.dsn())
        client = TestClient(create_app(source, TOKEN))
        answer = await asyncio.to_thread(
            client.get, "/api/panels", headers=BEARER, params={"names": "rollout_rates,rollout_spans", "rollout_id": "ro-000000000001"}
        )
        body = answer.json()
        assert body["source"]["kind"] == "server" and "agl:" not in body["source"]["where"]  # no credentials shown
        assert body["panels"]["rollout_rates"]["rows"][0][:2] == [6, 1] and len(body["panels"]["rollout_spans"]["rows"]) == 3
        source.close()
    finally:
        await door.stop()
        writer.close()
