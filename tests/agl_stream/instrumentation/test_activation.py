"""Instrumentations are armed when the tracer starts and activated when the agent imports the library."""

from __future__ import annotations

import subprocess
import sys


def test_a_library_is_instrumented_when_the_agent_imports_it_not_before() -> None:
    """Starting the agl tracer imports neither openai nor langchain (about a second of CPU each, in every
    runner process); the agent importing openai later gets a traced client."""
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from agl_stream.instrumentation import active, instrument_installed\n"
        "armed = instrument_installed(TracerProvider())\n"
        "print('armed:' + ','.join(armed))\n"
        "print('imported:' + ','.join(m for m in ('openai', 'langchain_core') if m in sys.modules))\n"
        "import openai\n"
        "print('active:' + ','.join(active()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = dict(line.split(":", 1) for line in out.stdout.split())
    assert {"openai", "langchain"} <= set(lines["armed"].split(",")), out.stdout
    assert lines["imported"] == "", out.stdout
    assert lines["active"] == "openai", out.stdout + out.stderr


def test_the_install_hint_names_what_installs_each_tracing() -> None:
    from pathlib import Path

    from agl_stream.instrumentation import INSTRUMENTATIONS, SIDE_VENV

    root = Path(__file__).resolve().parents[3]
    side_venv_packages = (root / "requirements" / "frameworks-venv.txt").read_text()
    pyproject = (root / "pyproject.toml").read_text()
    for item in INSTRUMENTATIONS:
        if item.extra == SIDE_VENV:  # its instrumentation package is pinned in the side venv's requirements
            assert "requirements/frameworks-venv.txt" in item.install_hint
            assert f"openinference-instrumentation-{item.library.split('_')[0]}" in side_venv_packages, item
        elif item.extra != "base":
            assert item.install_hint == f"pip install 'agl-stream[{item.extra}]'"
            assert f"\n{item.extra} = [" in pyproject, item
