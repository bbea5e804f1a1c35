"""The kit's one way to host HTTP: on the running loop, on a thread of its own, and as a process's main job."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from agl_stream.service import ExitCode, HttpHost, add_health_routes, always_healthy, bound_socket, health_app

pytestmark = pytest.mark.timeout(120)


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    return app


def test_a_bound_socket_reports_its_port_and_a_taken_port_fails_before_serving() -> None:
    sock = bound_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0 and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        sock.listen(1)
        with pytest.raises(OSError):
            HttpHost(_app(), "127.0.0.1", port)
    finally:
        sock.close()


async def test_on_the_running_loop_it_serves_then_stops_and_frees_the_port() -> None:
    host = await HttpHost(_app(), name="t").start()
    async with httpx.AsyncClient(base_url=host.url) as client:
        assert (await client.get("/hello")).json() == {"hello": "world"}
    await host.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{host.url}/hello", timeout=2)
    bound_socket("127.0.0.1", host.port).close()  # the port is free again


async def test_on_a_thread_it_answers_while_the_callers_loop_is_busy() -> None:
    host = await HttpHost(_app(), name="t").start_threaded()
    try:
        started = time.monotonic()
        reply = await asyncio.to_thread(httpx.get, f"{host.url}/hello", timeout=5)
        assert reply.status_code == 200
        # the caller's loop blocked for a second: the threaded server answers meanwhile
        result: list[int] = []
        thread_call = asyncio.get_running_loop().run_in_executor(
            None, lambda: result.append(httpx.get(f"{host.url}/hello", timeout=5).status_code))
        time.sleep(1.0)  # blocks this loop on purpose
        await thread_call
        assert result == [200] and time.monotonic() - started < 30
    finally:
        await host.stop_threaded()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{host.url}/hello", timeout=2)


def test_health_answers_ok_or_failing_on_every_path_and_ping_like_clickhouse() -> None:
    from fastapi.testclient import TestClient

    state = {"healthy": True}
    app = FastAPI()
    add_health_routes(app, lambda: (state["healthy"], {"apps": 2}), ["/health", "/v1/agl/health"], ping=True)
    client = TestClient(app)
    for path in ("/health", "/v1/agl/health"):
        reply = client.get(path)
        assert reply.status_code == 200 and reply.json() == {"apps": 2, "status": "ok"}
    assert client.get("/ping").text == "Ok.\n"
    state["healthy"] = False
    assert client.get("/health").status_code == 503 and client.get("/health").json()["status"] == "failing"
    assert client.get("/ping").status_code == 503
    assert TestClient(health_app(always_healthy(server="x"))).get("/health").json() == {"server": "x", "status": "ok"}
    assert TestClient(health_app(always_healthy())).get("/nope").status_code == 404


_MAIN_JOB = """
import asyncio, sys, time
from fastapi import FastAPI
from agl_stream.service import HttpHost, StopDeadline

app = FastAPI()

@app.get("/slow")
async def slow():
    await asyncio.sleep(float(sys.argv[2]))
    return {"slow": True}

host = HttpHost(app, name="main-job", graceful_s=float(sys.argv[3]))
print(host.port, flush=True)
host.run(StopDeadline(float(sys.argv[3]), name="main-job", grace=1.0))
print("after the server", flush=True)  # the service's own stop runs here
"""


def _main_job(tmp_path: Path, slow_s: float, graceful_s: float) -> tuple[subprocess.Popen[str], str]:
    script = tmp_path / "main_job.py"
    script.write_text(_MAIN_JOB)
    proc = subprocess.Popen([sys.executable, str(script), "x", str(slow_s), str(graceful_s)], stdout=subprocess.PIPE,
                            text=True, cwd=os.getcwd())  # fmt: skip
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{proc.stdout.readline().strip()}"


def test_as_the_main_job_sigterm_finishes_in_flight_requests_then_the_caller_continues(tmp_path: Path) -> None:
    proc, url = _main_job(tmp_path, slow_s=1.0, graceful_s=10.0)
    try:
        with httpx.Client(timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get(url + "/docs")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server never answered"
                    time.sleep(0.1)
            import threading

            answers: list[int] = []
            request = threading.Thread(target=lambda: answers.append(client.get(url + "/slow").status_code))
            request.start()
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            request.join(15)
        out, _ = proc.communicate(timeout=20)
        assert answers == [200], "the request in flight at SIGTERM was answered"
        assert proc.returncode == 0 and "after the server" in out
    finally:
        proc.kill()


def test_as_the_main_job_a_request_that_outlives_the_graceful_stop_is_cut_within_the_bound(tmp_path: Path) -> None:
    proc, url = _main_job(tmp_path, slow_s=60.0, graceful_s=1.0)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/docs", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        import threading

        threading.Thread(target=lambda: httpx.get(url + "/slow", timeout=30), daemon=True).start()
        time.sleep(0.3)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        # uvicorn cancels the request after graceful_s, then the caller's own stop runs: well inside the deadline
        assert time.monotonic() - began < 1.0 + 1.0 + 5
        assert proc.returncode == 0, f"exit {proc.returncode} (the deadline's is {int(ExitCode.STOP_TIMED_OUT)})"
    finally:
        proc.kill()
