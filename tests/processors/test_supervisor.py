"""The process supervisor's per-app environment (pure logic: no child is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agl_stream_processors.supervisor import SINKS_ENV, ProcessSupervisor


def _envs(tmp_path: Path) -> dict[str, dict[str, str]]:
    supervisor = ProcessSupervisor(["sinks", "state-machine", "triplets"], [], state_dir=tmp_path)
    return {app.name: app.env for app in supervisor.apps}


def test_the_engine_owner_gets_the_memory_settings_and_no_other_app_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SINKS_ENV:
        monkeypatch.delenv(name, raising=False)
    envs = _envs(tmp_path)
    assert envs["sinks"] == {"JE_MALLOC_CONF": "narenas:1,tcache:false", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert envs["state-machine"] == {} and envs["triplets"] == {}


def test_a_variable_set_by_the_operator_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
    monkeypatch.delenv("JE_MALLOC_CONF", raising=False)
    assert _envs(tmp_path)["sinks"] == {"JE_MALLOC_CONF": "narenas:1,tcache:false"}  # the child inherits mimalloc
