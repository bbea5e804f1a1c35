"""`agl-stream ingest otlp` as a real multi-worker uvicorn process: serve, aggregate metrics, stop cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agl_stream.config import Settings
from tests.ingest.helpers import free_port, read_spans

pytestmark = pytest.mark.integration

PROGRAM = Path(__file__).with_name("otel_program.py")


def _stopped_cleanly(process: subprocess.Popen, err: str) -> bool:
    """Exit 0 (worker supervisor) or uvicorn re-raising SIGTERM after a completed graceful shutdown."""
    return process.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in err


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {process.stderr.read() if process.stderr else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not healthy within {timeout}s")


async def test_otlp_command_with_two_workers_serves_and_shuts_down_cleanly(topics: Settings) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AGL_TOPIC_PREFIX": topics.topic_prefix, "AGL_INGEST_TOKEN": "cli-token"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "agl_stream.cli.main", "ingest", "otlp", "--bootstrap", topics.kafka_bootstrap or "",
         "--port", str(port), "--workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_healthy(url, process)
        for n in range(3):  # several exports so both workers are likely to take some
            done = subprocess.run(
                [sys.executable, str(PROGRAM), f"{url}/v1/traces", f"ro-cli{n}", "at-cli", "protobuf", "cli-token"],
                capture_output=True, text=True, timeout=60,
            )
            assert done.returncode == 0, done.stderr
        unauthorized = httpx.post(f"{url}/v1/traces", content=b"", headers={"Content-Type": "application/x-protobuf"})
        assert unauthorized.status_code == 401
        metrics = httpx.get(f"{url}/metrics").text
        accepted = [line for line in metrics.splitlines() if line.startswith("agl_ingest_spans_accepted_total")]
        assert accepted and float(accepted[0].split()[-1]) == 9.0  # the sum over both workers
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=60)
    assert _stopped_cleanly(process, err), err
    got = await read_spans(topics, expected=9)
    assert sorted({key for key, _ in got}) == ["ro-cli0", "ro-cli1", "ro-cli2"] and len(got) == 9


async def test_proxy_command_serves_recorded_and_untracked_calls(topics: Settings) -> None:
    from tests.ingest.fake_backend import REPLY, create_fake_backend
    from tests.ingest.helpers import ServedApp

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AGL_TOPIC_PREFIX": topics.topic_prefix, "AGL_INGEST_BACKEND_API_KEY": "sk-cli-backend"}
    env.pop("AGL_INGEST_TOKEN", None)
    with ServedApp(create_fake_backend()) as backend:
        process = subprocess.Popen(
            [sys.executable, "-m", "agl_stream.cli.main", "ingest", "proxy", "--backend", f"fake-model={backend.url}/v1",
             "--allow-untracked", "--bootstrap", topics.kafka_bootstrap or "", "--port", str(port)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            _wait_healthy(url, process)
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
            tracked = httpx.post(f"{url}/rollout/ro-cliproxy/attempt/at-cli/v1/chat/completions", json=body, timeout=60)
            untracked = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
            assert tracked.status_code == untracked.status_code == 200
            assert tracked.json()["choices"][0]["message"]["content"] == REPLY
            assert backend.server.config.app.state.requests[-1]["headers"]["authorization"] == "Bearer sk-cli-backend"
        finally:
            process.send_signal(signal.SIGTERM)
            _out, err = process.communicate(timeout=60)
    assert _stopped_cleanly(process, err), err
    assert "sk-cli-backend" not in err
    got = await read_spans(topics, expected=1, settle=1.0)
    assert [(key, span.name) for key, span in got] == [("ro-cliproxy", "openai.chat.completion")]
