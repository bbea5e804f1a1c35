"""`agl-stream serve` and the trainer.yaml schema, as a user runs them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agl_stream_trainer.config import TrainerConfig

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_is_valid() -> None:
    cfg = TrainerConfig.from_yaml(ROOT / "trainer" / "trainer.example.yaml")
    assert cfg.algorithm.estimator == "grpo" and cfg.scheduler is not None and cfg.batcher.max_staleness == 1


def test_unknown_keys_are_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("algorithm: {estimater: grpo}\n")
    with pytest.raises(Exception, match="estimater"):
        TrainerConfig.from_yaml(bad)


@pytest.mark.slow
def test_serve_command_answers_openai_requests(tiny_model_dir: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agl_stream.cli.main", "serve", "--model", str(tiny_model_dir), "--port", str(port),
         "--served-model-name", "tiny", "--policy-version", "7"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else "exited"
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        models = httpx.get(base + "/v1/models").json()
        assert models["data"][0]["id"] == "tiny" and models["data"][0]["policy_version"] == 7
        reply = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
                           timeout=60)
        assert reply.status_code == 200 and reply.headers["x-agl-policy-version"] == "7"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0
