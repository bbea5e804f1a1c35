"""Nothing a starter started outlives it (issue 32): SIGKILL the starter, and every process below it is
gone within its kind's bound, with the broker alive and with the broker already dead.

One starter (``starter.py``) runs every kind of process at once, as a training job does: the local
broker, the trimmer, the processors' supervisor and its apps, a two-process runner service, the store
front door and the learner. Each process is held to its own bound (``docs/operations.md``, "Stopping").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agl_stream.broker import choose_local_broker
from agl_stream.broker._kafka import STOP_TIMEOUT as BROKER_STOP_TIMEOUT, remove_orphaned_data_dirs
from agl_stream.runner.cli import runner_stop_timeout
from agl_stream.service import KILL_MARGIN_S, STOP_GRACE_S, stop_bound
from agl_stream_ingest.stopping import stop_timeout as front_door_stop_timeout
from tests.agl_stream.service.starter import RUNNER_GRACE_S, SHUTDOWN_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[3]
#: a loaded 2-core machine: process exit, the kernel's signal delivery and this test's polling
SLACK_S = 5.0

#: (label, what its command line holds, its bound in seconds from its starter's death)
KINDS = [
    ("broker", "kafka.Kafka", BROKER_STOP_TIMEOUT),
    ("broker", "tansu broker", BROKER_STOP_TIMEOUT),  # the no-Java fallback
    ("trimmer", "topics trim", 10.0 + STOP_GRACE_S),
    ("processors", "cli.main processors", stop_bound(SHUTDOWN_TIMEOUT_S) + STOP_GRACE_S),
    ("runners", "cli.main runner", runner_stop_timeout(RUNNER_GRACE_S) + KILL_MARGIN_S + STOP_GRACE_S),
    ("front door", "ingest store", front_door_stop_timeout(5.0) + STOP_GRACE_S),
    ("learner", "cli.main trainer", STOP_GRACE_S),  # no graceful stop: SIGTERM ends it
]


def label(cmdline: str) -> tuple[str, float]:
    for name, needle, bound in KINDS:
        if needle in cmdline:
            return name, bound
    raise AssertionError(f"a process of no known kind: {cmdline}")


def start_everything(data_dir: Path) -> tuple[subprocess.Popen[str], dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    starter = subprocess.Popen([sys.executable, "-m", "tests.agl_stream.service.starter", "runners,front-door,learner",
                                str(data_dir)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    line = starter.stdout.readline()  # type: ignore[union-attr]
    if not line:
        starter.kill()
        raise AssertionError(f"the starter failed (exit {starter.wait()}); logs in {data_dir / 'logs'}")
    return starter, json.loads(line)


def gone_within_bounds(tree: list[dict]) -> dict[str, list[float]]:
    """Poll until every process is gone or the longest bound (plus slack) passed; per kind, when each went."""
    procs = {}
    for item in tree:
        try:
            procs[item["pid"]] = (psutil.Process(item["pid"]), *label(item["cmdline"]))
        except psutil.NoSuchProcess:
            continue
    began = time.monotonic()
    gone_at: dict[int, float] = {}
    limit = max(bound for _p, _n, bound in procs.values()) + SLACK_S
    while len(gone_at) < len(procs) and time.monotonic() - began < limit:
        for pid, (proc, _name, _bound) in procs.items():
            if pid not in gone_at and not _alive(proc):
                gone_at[pid] = time.monotonic() - began
        time.sleep(0.1)
    report: dict[str, list[float]] = {}
    late = []
    for pid, (proc, name, bound) in procs.items():
        took = gone_at.get(pid)
        report.setdefault(name, []).append(round(took, 1) if took is not None else float("inf"))
        if took is None or took > bound + SLACK_S:
            late.append(f"{name} (pid {pid}): {'still running' if took is None else f'{took:.1f} s'}, bound {bound:.0f} s")
            if took is None:
                proc.kill()
    assert not late, "outlived its starter: " + "; ".join(late)
    return report


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("broker", ["alive", "dead"])
def test_every_process_a_sigkilled_starter_started_is_gone_within_its_bound(broker: str, tmp_path: Path) -> None:
    starter, started = start_everything(tmp_path)
    try:
        kinds = {label(item["cmdline"])[0] for item in started["tree"]}
        expected = {name for name, _n, _b in KINDS} - ({"trimmer"} if started.get("broker_kind") == "tansu" else set())
        assert kinds == expected, f"not every kind started: {sorted(kinds)}"  # Tansu keeps no disk to trim
        if broker == "dead":
            os.kill(started["broker"], signal.SIGKILL)  # nothing can commit, flush or leave a group any more
            time.sleep(2.0)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        report = gone_within_bounds([p for p in started["tree"] if broker == "alive" or p["pid"] != started["broker"]])
        print(f"broker {broker}: seconds until gone, per kind: {json.dumps(report)}")
    finally:
        if starter.poll() is None:
            starter.kill()
        starter.wait(10)
        remove_orphaned_data_dirs()  # the SIGKILLed starter's broker folder (the next broker start would sweep it)


CLUSTER_STARTER = """
import json, sys
from agl_stream.broker import KafkaBroker
broker = KafkaBroker(brokers=3).start()
print(json.dumps({"pids": broker.pids, "data_dir": str(broker.data_dir)}), flush=True)
sys.stdin.read()  # until killed
"""


def test_a_cluster_whose_starter_is_sigkilled_is_gone_and_its_folder_swept_at_the_next_start() -> None:
    """All three nodes lose their starter at once, one of them paused (SIGSTOP, as the nemesis does): a stopped
    process never handles a SIGTERM, and the others' controlled shutdowns wait for a quorum. None may wait."""
    if choose_local_broker() != "kafka":
        pytest.skip("Apache Kafka cannot run here (no java): a cluster needs it")
    starter = subprocess.Popen([sys.executable, "-c", CLUSTER_STARTER], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = starter.stdout.readline()  # type: ignore[union-attr]
        assert line, f"the cluster did not start (exit {starter.wait()})"
        started = json.loads(line)
        assert len(started["pids"]) == 3
        os.kill(started["pids"][2], signal.SIGSTOP)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        report = gone_within_bounds([{"pid": pid, "cmdline": "kafka.Kafka"} for pid in started["pids"]])
        print(f"three-node cluster: seconds until gone: {report['broker']}")
        folder = Path(started["data_dir"])
        assert folder.exists()  # nothing could remove it: its owner was SIGKILLed
        assert folder in remove_orphaned_data_dirs() and not folder.exists()
    finally:
        if starter.poll() is None:
            starter.kill()
