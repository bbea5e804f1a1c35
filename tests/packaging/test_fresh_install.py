"""A plain ``pip install .`` into a fresh venv, used from outside the checkout.

* ``import agl_stream`` works and pulls no torch, faust, chdb or litellm;
* the service folders do not claim generic names: ``import trainer|processors|topics|ingest`` fail
  (they install as ``agl_stream_trainer``, ``agl_stream_processors``, ...);
* ``agl-stream clickhouse migrate`` needs the embedded engine, which is not in the base install (chdb
  is about 0.5 GB; agents do not need it): the command says which extra to install, and after
  ``pip install '.[processors]'`` it migrates an embedded database with the schema shipped in the
  package (``agl_stream_deploy``).

Installs come from pip's cache and the pinned constraints (about a minute in all on the build box).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "faust", "chdb", "clickhouse_connect", "litellm")


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _tracked_copy(target: Path) -> Path:
    """The checkout's tracked files only (a build never writes into the worktree)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_plain_install_outside_the_checkout(tmp_path: Path) -> None:
    src = _tracked_copy(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py, cli = str(venv / "bin/python"), str(venv / "bin/agl-stream")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(src / "requirements/constraints.txt")]
    installed = _run([*pip, str(src)], tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    probe = (
        "import sys, importlib\n"
        "import agl_stream as agl\n"
        "agl.Trainer, agl.rollout, agl.TracerTraceToTriplet, agl.StoreClient\n"
        f"print('heavy', sorted(h for h in {HEAVY!r} if h in sys.modules))\n"
        "for name in ('trainer', 'processors', 'topics', 'ingest'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        print(name, 'importable')\n"
        "    except ImportError:\n"
        "        print(name, 'absent')\n"
        "import agl_stream_deploy, agl_stream_trainer\n"
        "print('deploy', agl_stream_deploy.__file__.startswith(sys.prefix))\n"
    )
    out = _run([py, "-c", probe], outside)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["heavy []", "trainer absent", "processors absent", "topics absent",
                                       "ingest absent", "deploy True"]  # fmt: skip

    dsn = f"chdb://{tmp_path / 'clickhouse'}"
    missing = _run([cli, "clickhouse", "migrate", "--dsn", dsn], outside)
    assert missing.returncode == 2 and "pip install 'agl-stream[processors]'" in missing.stderr, missing.stderr[-2000:]

    extra = _run([*pip, f"{src}[processors]"], tmp_path)
    assert extra.returncode == 0, extra.stderr[-3000:]
    migrated = _run([cli, "clickhouse", "migrate", "--dsn", dsn], outside)
    assert migrated.returncode == 0 and "applied 0001_init" in migrated.stdout, migrated.stdout + migrated.stderr[-2000:]
    status = _run([cli, "clickhouse", "status", "--dsn", dsn], outside)
    assert status.returncode == 0 and "0001_init: applied" in status.stdout and "triplets: 0 rows" in status.stdout
