"""The services' event loop and HTTP parser: uvloop and httptools where installed, asyncio's and h11 when asked."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agl_stream.config import Settings, SettingsError
from agl_stream.service import loop_factory, run_on_service_loop
from agl_stream.service._loop import uvicorn_choices

ROOT = Path(__file__).resolve().parents[3]
uvloop = pytest.importorskip("uvloop", reason="uvloop comes with the ingest and processors extras")


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_services_run_on_uvloop_where_installed_and_on_asyncio_when_asked() -> None:
    assert loop_factory(Settings.from_env(env={})) is uvloop.new_event_loop
    assert run_on_service_loop(_loop_module, Settings.from_env(env={})).startswith("uvloop")
    plain = Settings.from_env(env={"AGL_EVENT_LOOP": "asyncio"})
    assert loop_factory(plain) is None
    assert run_on_service_loop(_loop_module, plain).startswith("asyncio")


def test_asking_for_uvloop_where_it_is_missing_is_an_error_that_says_where_it_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_factory(Settings.from_env(env={})) is None  # auto: asyncio's, quietly
    with pytest.raises(SettingsError, match="AGL_EVENT_LOOP=uvloop.*not installed"):
        loop_factory(Settings.from_env(env={"AGL_EVENT_LOOP": "uvloop"}))


def test_uvicorn_gets_the_same_choices() -> None:
    assert uvicorn_choices(Settings.from_env(env={})) == {"loop": "auto", "http": "auto"}
    settings = Settings.from_env(env={"AGL_EVENT_LOOP": "asyncio", "AGL_HTTP_PARSER": "h11"})
    assert uvicorn_choices(settings) == {"loop": "asyncio", "http": "h11"}
    with pytest.raises(SettingsError, match="AGL_HTTP_PARSER"):
        Settings.from_env(env={"AGL_HTTP_PARSER": "picohttp"})


def test_a_service_started_by_run_until_signal_runs_on_uvloop() -> None:
    """The processors' apps, the sinks and the supervisor all start through run_until_signal."""
    script = textwrap.dedent("""
        import asyncio
        from agl_stream.service import run_until_signal

        async def main(stop):
            return type(asyncio.get_running_loop()).__module__

        print(run_until_signal(main, name="probe"))
    """)
    env = {k: v for k, v in os.environ.items() if k != "AGL_EVENT_LOOP"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("uvloop"), out.stdout
