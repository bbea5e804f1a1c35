"""The local Tansu broker and the ``agl-stream broker`` / ``topics`` commands."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from agl_stream.broker import LocalBroker, broker_for, wait_for_port
from agl_stream.config import Settings
from agl_stream_topics.catalog import CATALOG

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "agl_stream.cli.main"]


def test_local_broker_starts_and_stops() -> None:
    broker = LocalBroker().start()
    try:
        assert broker.running and wait_for_port("127.0.0.1", broker.port, 1)
    finally:
        broker.stop()
    assert not broker.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", broker.port), timeout=0.5).close()


def test_configured_cluster_starts_nothing() -> None:
    settings = Settings.from_env(env={}, kafka_bootstrap="kafka.example:9092")
    with broker_for(settings) as bootstrap:
        assert bootstrap == "kafka.example:9092"


def test_broker_command_prints_bootstrap_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen([*CLI, "broker"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith("AGL_KAFKA_BOOTSTRAP=127.0.0.1:")
        host, port = line.split("=", 1)[1].rsplit(":", 1)
        assert wait_for_port(host, int(port), 5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        time.sleep(0.2)
        assert not wait_for_port(host, int(port), 0.5), "Tansu outlived the command"
    finally:
        proc.kill()


def test_topics_commands(kafka_bootstrap: str) -> None:
    env = {**os.environ, "AGL_KAFKA_BOOTSTRAP": kafka_bootstrap, "AGL_TOPIC_PREFIX": f"cli{os.getpid()}"}
    created = subprocess.run([*CLI, "topics", "create"], env=env, capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    assert created.stdout.count("created") == len(CATALOG)
    again = subprocess.run([*CLI, "topics", "create"], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "created" not in again.stdout
    listed = subprocess.run([*CLI, "topics", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert f"cli{os.getpid()}.spans" in listed.stdout.split()
    described = subprocess.run([*CLI, "topics", "describe"], env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=60)
    assert described.returncode == 0 and "RolloutSnapshot" in described.stdout


def test_cli_errors_follow_conventions() -> None:
    assert subprocess.run([*CLI, "--help"], capture_output=True).returncode == 0
    bad = subprocess.run([*CLI, "topics", "create"], env={**os.environ, "AGL_PARTITIONS": "lots", "AGL_KAFKA_BOOTSTRAP": "x:1"},
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "AGL_PARTITIONS" in bad.stderr
    nobroker = subprocess.run([*CLI, "topics", "create"], env={k: v for k, v in os.environ.items() if k != "AGL_KAFKA_BOOTSTRAP"},
                              capture_output=True, text=True)  # fmt: skip
    assert nobroker.returncode == 2
