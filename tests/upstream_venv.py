"""Where upstream Agent Lightning 0.3.0 lives for tests: a side venv, never a dependency of agl-stream.

``make upstream`` (a prerequisite of ``make test``) creates it at ``.agl/upstream-venv`` with the
committed constraints, so the dependency set is the one 0.3.0 shipped against. Tests that run
upstream's own code (its store client against our store front door, its module list) call
:func:`upstream_python`, which skips with the reason when the venv is missing (``AGL_UPSTREAM_VENV``
points elsewhere). Standard library and pytest only.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM_VENV = Path(os.environ.get("AGL_UPSTREAM_VENV", ROOT / ".agl" / "upstream-venv"))
UPSTREAM_VERSION = "0.3.0"
#: what upstream's code needs to run offline
UPSTREAM_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AGENTOPS_LOGGING_TO_FILE": "False"}


def upstream_python() -> Path:
    """The side venv's python with agentlightning 0.3.0; skips the calling test when it is missing."""
    python = UPSTREAM_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"upstream agentlightning {UPSTREAM_VERSION} side venv missing at {UPSTREAM_VENV}: run `make upstream`")
    return python


def run_upstream(args: list[str], *, timeout: float = 600, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run the side venv's python with ``args`` (stdout/stderr captured as text)."""
    return subprocess.run(
        [str(upstream_python()), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, **UPSTREAM_ENV, **(env or {})},
    )  # fmt: skip
