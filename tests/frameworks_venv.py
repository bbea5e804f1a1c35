"""Where the agent frameworks that cannot install beside the stack live for tests: a side venv.

``make frameworks-venv`` (a prerequisite of ``make test``) creates ``.agl/frameworks-venv`` with agl-stream's
base install plus AutoGen AgentChat and CrewAI (``requirements/frameworks-venv.txt``, resolved with the
committed ``requirements/frameworks-venv-constraints.txt``): AutoGen needs protobuf 5, CrewAI pydantic < 2.13,
rich < 15 and mcp < 2, none of which the stack's pins allow. Tests run agent runners with that venv's python
(``AGL_RUNNER_PYTHON``) while the broker, processors and ClickHouse run here. :func:`frameworks_python` skips
the calling test with the reason when the venv is missing (``AGL_FRAMEWORKS_VENV`` points elsewhere).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS_VENV = Path(os.environ.get("AGL_FRAMEWORKS_VENV", ROOT / ".agl" / "frameworks-venv"))


def frameworks_python(*modules: str) -> Path:
    """The side venv's python; skips the calling test when it is missing or lacks one of ``modules``."""
    python = FRAMEWORKS_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"the frameworks side venv is missing at {FRAMEWORKS_VENV}: run `make frameworks-venv`")
    for module in modules:
        found = subprocess.run([str(python), "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"],
                               capture_output=True, timeout=60)  # fmt: skip
        if found.returncode != 0:
            pytest.skip(f"{module} is not installed in {FRAMEWORKS_VENV}: run `make frameworks-venv`")
    return python
