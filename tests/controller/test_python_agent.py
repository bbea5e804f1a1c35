"""Upstream v1.0's ``local.agent_class`` convention: a Python class run per attempt in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agl_stream_controller.python_agent import AgentClassError, load_agent_class

if TYPE_CHECKING:
    from agl_stream.config import Settings

MODULE = textwrap.dedent("""
    import asyncio, os, pathlib

    class AsyncAgent:
        async def run(self):
            await asyncio.sleep(0)
            pathlib.Path(os.environ["OUT"]).write_text("async " + os.environ["QUESTION"])

    class SyncAgent:
        def run(self):
            pathlib.Path(os.environ["OUT"]).write_text("sync")

    class Failing:
        async def run(self):
            raise RuntimeError("the model said no")

    not_a_class = 3
""")


@pytest.fixture()
def agent_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "my_agents.py").write_text(MODULE)
    return folder


def _run(agent_dir: Path, name: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "QUESTION": "2+2?"}
    return subprocess.run([sys.executable, "-m", "agl_stream_controller.python_agent", name], cwd=agent_dir, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_both_of_upstreams_spellings_run_the_class_in_the_folder_it_is_started_in(agent_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _run(agent_dir, "my_agents:AsyncAgent", out).returncode == 0
    assert out.read_text() == "async 2+2?"
    assert _run(agent_dir, "my_agents.SyncAgent", out).returncode == 0
    assert out.read_text() == "sync"


def test_an_agent_that_raises_exits_1_with_its_traceback(agent_dir: Path, tmp_path: Path) -> None:
    done = _run(agent_dir, "my_agents:Failing", tmp_path / "out")
    assert done.returncode == 1
    assert "RuntimeError: the model said no" in done.stderr


@pytest.mark.parametrize(
    ("name", "why"),
    [("my_agents:Missing", "has no class 'Missing'"), ("my_agents:not_a_class", "has no class 'not_a_class'"),
     ("nowhere:Agent", "cannot import 'nowhere'"), ("Agent", "names no class")],
)  # fmt: skip
def test_a_class_that_cannot_be_found_exits_2_saying_why(agent_dir: Path, tmp_path: Path, name: str, why: str) -> None:
    done = _run(agent_dir, name, tmp_path / "out")
    assert done.returncode == 2
    assert why in done.stderr


def test_loading_reports_a_missing_module_as_its_own_error(monkeypatch: pytest.MonkeyPatch, agent_dir: Path) -> None:
    monkeypatch.syspath_prepend(str(agent_dir))
    assert load_agent_class("my_agents:SyncAgent").__name__ == "SyncAgent"
    with pytest.raises(AgentClassError, match="cannot import"):
        load_agent_class("my_agents_gone.Agent")


REWARDING = textwrap.dedent("""
    import json, os

    class Agent:
        async def run(self):
            with open(os.environ["AGL_REWARD_FILE"], "w") as out:  # or a POST to AGL_EVENT_URL, as upstream's do
                json.dump({"value": 1.0 if os.environ["QUESTION"] == "2+2?" else 0.0}, out)
""")


@pytest.mark.integration
async def test_the_cli_runs_an_agent_class_per_attempt_from_its_folder(topics: "Settings", tmp_path: Path) -> None:
    from agl_stream.types import AttemptEvent
    from tests.agl_stream.runner.helpers import collect
    from tests.agl_stream.runner.test_runner import _enqueue, _finished

    folder = tmp_path / "upstream_like"
    folder.mkdir()
    (folder / "reward_agent.py").write_text(REWARDING)
    ids = await _enqueue(topics, [{"question": "2+2?"}], mode="train")
    done = subprocess.run(
        [sys.executable, "-m", "agl_stream.cli.main", "controller", "--agent-class", "reward_agent:Agent",
         "--cwd", str(folder), "--env-map", "QUESTION=input.question", "--max-rollouts", "1", "--no-progress",
         "--logs-dir", str(tmp_path / "logs")],
        env={**os.environ, **topics.to_env(always=("kafka_bootstrap",))}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 1))
    assert finished[ids[0]].status == "succeeded" and finished[ids[0]].metadata["final_reward"] == 1.0


def test_the_cli_takes_a_command_or_an_agent_class_not_both() -> None:
    done = subprocess.run([sys.executable, "-m", "agl_stream.cli.main", "controller", "--bootstrap", "127.0.0.1:1",
                           "--agent-class", "a:B", "--", "node", "agent.js"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "300"})  # fmt: skip
    assert done.returncode == 2 and "not both" in done.stderr
