"""The agent path stays light: importing agl_stream's agent-facing modules pulls no heavy stack."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import agl_stream

HEAVY = ("torch", "faust", "chdb", "clickhouse_connect", "litellm", "transformers", "verl", "ray", "mode")


def _agent_facing_modules() -> list[str]:
    names = ["agl_stream"]
    for info in pkgutil.walk_packages(agl_stream.__path__, prefix="agl_stream."):
        if info.name.startswith("agl_stream.cli"):
            continue  # the CLI loads service packages on demand, by design
        names.append(info.name)
    return names


def test_agent_facing_modules_import_no_heavy_dependency() -> None:
    modules = _agent_facing_modules()
    assert "agl_stream.kafka" in modules and "agl_stream.serialization" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(','.join(sorted(h for h in {HEAVY!r} if h in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported on the agent path: {out.stdout.strip()}"


def test_heavy_packages_blocked_still_import_agent_path() -> None:
    """Simulate the base install: make the heavy packages unimportable, the agent path still loads."""
    modules = _agent_facing_modules()
    code = (
        "import sys, importlib\n"
        f"for h in {HEAVY!r}: sys.modules[h] = None\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_upstream_surface_resolves_lazily_without_heavy_imports() -> None:
    """``import agl_stream`` loads no submodule; resolving every public name (but the trainer's
    algorithms) pulls nothing heavy; APO/VERL/RL load the trainer package only when touched."""
    code = (
        "import sys\n"
        "import agl_stream as agl\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('agl_stream.'))\n"
        "print('after-import', ','.join(loaded))\n"
        "for name in agl.__all__:\n"
        "    if name not in ('APO', 'VERL', 'RL'): getattr(agl, name)\n"
        f"print('heavy', ','.join(sorted(h for h in {HEAVY!r} if h in sys.modules)))\n"
        "print('trainer', 'agl_stream_trainer' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["after-import ", "heavy ", "trainer False"], out
