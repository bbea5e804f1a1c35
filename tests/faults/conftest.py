"""Registers the ``chaos`` marker (``make chaos`` runs ``pytest tests/faults -m chaos``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: full fault-injection scenario (make chaos); reduced versions run in make test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The full scenarios run only when asked for with ``-m chaos`` (``make chaos``), not in ``make test``."""
    if "chaos" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="full fault-injection scenario: run with `make chaos` (pytest tests/faults -m chaos)")
    for item in items:
        if item.get_closest_marker("chaos") is not None:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Every scenario's ``enqueued, succeeded, failed, spans, triplets, duplicates, lost`` line, together."""
    from tests.faults.report import LINES

    if LINES:
        terminalreporter.section("fault-injection scenarios")
        for line in LINES:
            terminalreporter.write_line(line)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A private data directory outside pytest's basetemp: other sessions' pytest runs on this machine
    prune old basetemp folders, which must not pull the ClickHouse data out from under a running scenario.
    ``AGL_FAULTS_KEEP=1`` keeps it (service logs under ``logs/``) for a post-mortem."""
    path = Path(tempfile.mkdtemp(prefix="agl-faults-"))
    try:
        yield path
    finally:
        if os.environ.get("AGL_FAULTS_KEEP", "").lower() in ("1", "true", "yes", "on"):
            print(f"kept the scenario's data and logs in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)
