"""Watching a run while it trains: the local stack runs rollouts, and meanwhile ``agl-stream sql``, the
dashboard's panel queries and the page in headless Chromium read the embedded ClickHouse through
the processors' SQL door.

One run serves the module: the local stack (broker, topics, processors owning the embedded engine),
a runner of the benchmark workload agent, a dozen quick rollouts and one slow one (10 rounds of
3-second steps) that is still running while the tests look, which is what "while it runs" means
here: every check also sees that rollout in flight.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceProcess, agl_command
from tests.benchmarks.workload_agent import ADAPTER_SPEC, make_tasks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
AGENT = "tests.benchmarks.workload_agent:workload_agent"
FAST = 12
TOKEN = "live-run-token"
IN_FLIGHT = {"preparing", "running"}  # preparing until the attempt's first span arrives (spans are heartbeats)


@dataclass
class LiveRun:
    settings: Settings
    env: dict[str, str]
    fast: list[str]
    slow: str
    dashboard_url: str


def agl(run: LiveRun, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agl_command(*args), cwd=ROOT, env=run.env, capture_output=True, text=True, timeout=120)


def sql_json(run: LiveRun, query: str) -> list[dict[str, Any]]:
    result = agl(run, "sql", query, "-f", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


async def _enqueue(settings: Settings, tasks: list[dict[str, Any]]) -> list[str]:
    async with StoreClient(settings) as store:
        rollouts = await store.enqueue_many_rollouts([{"input": task} for task in tasks])
    return [r.rollout_id for r in rollouts]


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    data_dir = tmp_path_factory.mktemp("live") / "agl"
    settings = Settings.from_env(env={}, data_dir=data_dir, partitions=2, kafka_session_timeout_ms=6000)
    stack = LocalStack(settings, processors=True, processor_args=["--adapter", ADAPTER_SPEC], log_dir=data_dir / "logs")
    dashboard = None
    try:
        settings = asyncio.run(stack.start())
        env = {**os.environ, **stack.env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        stack.start_runners(AGENT, 1, concurrency=4, env=env, extra_args=["--heartbeat-interval", "1", "--shutdown-grace", "0"])
        slow_task = {**make_tasks(1, seed=7, sleep=3.0, prefix="slow")[0], "rounds": 10}
        ids = asyncio.run(_enqueue(settings, [slow_task, *make_tasks(FAST, seed=1, sleep=0.02, prefix="fast")]))
        dashboard = ServiceProcess("dashboard", agl_command("dashboard", "--port", "0", "--refresh", "2"),
                                   env={**env, "AGL_DASHBOARD_TOKEN": TOKEN}, log_path=data_dir / "logs" / "dashboard.log").start()  # fmt: skip
        assert dashboard.wait_for_log("agl-stream dashboard: http", timeout=60), dashboard.tail()
        url = re.search(r"agl-stream dashboard: (\S+)", (data_dir / "logs" / "dashboard.log").read_text()).group(1)  # type: ignore[union-attr]
        run = LiveRun(settings, env, ids[1:], ids[0], url)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the quick rollouts are in the table (the slow one keeps running)
            finished = sql_json(run, "SELECT count() AS n FROM rollouts FINAL WHERE Status = 'succeeded'")[0]["n"]
            if finished >= FAST:
                break
            time.sleep(1)
        yield run
    finally:
        if dashboard is not None:
            dashboard.stop(timeout=10)
        for service in stack.services:
            if service.name == "runners":
                service.kill()  # the slow rollout need not finish
        stack.stop()


def _slow_is_running(run: LiveRun) -> None:
    rows = sql_json(run, f"SELECT Status AS status FROM rollouts FINAL WHERE RolloutId = '{run.slow}'")
    assert len(rows) == 1 and rows[0]["status"] in IN_FLIGHT, f"the slow rollout should still run while the test looks: {rows}"


def test_agl_stream_sql_returns_live_counts_while_rollouts_run(live_run: LiveRun) -> None:
    statuses = {r["status"]: r["n"] for r in sql_json(live_run, "SELECT Status AS status, count() AS n FROM rollouts FINAL GROUP BY status")}
    in_flight = {k: v for k, v in statuses.items() if k in IN_FLIGHT}
    assert statuses.get("succeeded") == FAST and sum(in_flight.values()) == 1, statuses  # one answer, mid-run
    query = f"SELECT count() AS spans FROM spans FINAL WHERE RolloutId = '{live_run.slow}'"
    first = sql_json(live_run, query)[0]["spans"]
    deadline = time.monotonic() + 60
    later = first
    while later <= first and time.monotonic() < deadline:  # the slow rollout's spans keep arriving
        time.sleep(1)
        later = sql_json(live_run, query)[0]["spans"]
    assert later > first, f"spans of the running rollout did not grow: {first} -> {later}"
    saved = agl(live_run, "sql", "--saved", "rollout_outcomes", "-f", "csv")
    assert saved.returncode == 0 and "succeeded" in saved.stdout and any(s in saved.stdout for s in IN_FLIGHT)
    replay = agl(live_run, "replay", "--adapter", ADAPTER_SPEC, "--dry-run", "--rollout-id", live_run.fast[0])
    assert replay.returncode == 0 and json.loads(replay.stdout)["trajectories"] == 1, replay.stderr
    _slow_is_running(live_run)


def test_the_dashboard_panel_queries_return_rows_while_rollouts_run(live_run: LiveRun) -> None:
    base, token = live_run.dashboard_url.split("/?token=")
    with httpx.Client(base_url=base, timeout=60) as http:
        assert http.get("/api/layout").status_code == 401  # no token
        assert http.get("/api/layout", headers={"Authorization": "Bearer nope"}).status_code == 403
        http.headers["Authorization"] = f"Bearer {token}"
        layout = http.get("/api/layout").json()
        names = [p["name"] for s in layout["sections"] for p in s["panels"]]
        answer = http.get("/api/panels", params={"names": ",".join(names), "rollout_id": live_run.fast[0]}).json()
    assert answer["source"]["kind"] == "door"
    panels = answer["panels"]
    assert not [n for n, r in panels.items() if "error" in r], {n: r["error"] for n, r in panels.items() if "error" in r}
    expect_rows = {"rollout_rates", "throughput", "rollout_outcomes", "throughput_over_time", "stage_latency",
                   "reward_over_time", "recent_rollouts", "workers", "spans_over_time", "spans_per_rollout",
                   "spans_per_rollout_summary", "tokens_over_time", "rollout_attempts", "rollout_spans", "rollout_triplets"}  # fmt: skip
    assert not [n for n in expect_rows if not panels[n]["rows"]]
    outcomes = {row[0]: row[1] for row in panels["rollout_outcomes"]["rows"]}
    assert outcomes.get("succeeded") == FAST and sum(v for k, v in outcomes.items() if k in IN_FLIGHT) == 1, outcomes
    assert dict(zip(panels["rollout_attempts"]["columns"], panels["rollout_attempts"]["rows"][0]))["status"] == "succeeded"
    _slow_is_running(live_run)


class _Panels(HTMLParser):
    """``data-panel`` cards of the rendered page with their state and row count, and the span rows drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.panels: dict[str, dict[str, str]] = {}
        self.tiles: list[str] = []
        self.span_rows = 0
        self._in_value = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "data-panel" in a:
            self.panels[a["data-panel"]] = a
        classes = a.get("class", "").split()
        if "wf-row" in classes:
            self.span_rows += 1
        self._in_value = "value" in classes and tag == "div"

    def handle_data(self, data: str) -> None:
        if self._in_value and data.strip():
            self.tiles.append(data.strip())
            self._in_value = False


def render_page(url: str, profile: Path) -> _Panels:
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}", "--window-size=1440,1600",
            "--virtual-time-budget=15000", "--dump-dom", url]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "data-panel" in done.stdout, done.stderr[-2000:]
    parser = _Panels()
    parser.feed(done.stdout)
    return parser


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_page_renders_non_empty_panels_in_headless_chromium(live_run: LiveRun, tmp_path: Path) -> None:
    overview = render_page(f"{live_run.dashboard_url}#/overview", tmp_path / "profile-1")
    for name in ("rollout_rates", "throughput", "rollout_outcomes", "throughput_over_time", "stage_latency"):
        panel = overview.panels[name]
        assert panel["data-state"] == "ok" and int(panel["data-rows"]) > 0, (name, panel)
    assert f"{FAST + 1}" in overview.tiles  # the Rollouts tile: every rollout of the run
    detail = render_page(f"{live_run.dashboard_url}#/rollout/{live_run.fast[0]}", tmp_path / "profile-2")
    spans = detail.panels["rollout_spans"]
    assert spans["data-state"] == "ok" and detail.span_rows == int(spans["data-rows"]) > 0  # one waterfall row per span
    assert detail.panels["rollout_triplets"]["data-state"] == "ok" and int(detail.panels["rollout_triplets"]["data-rows"]) > 0
    _slow_is_running(live_run)
