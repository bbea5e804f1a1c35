"""Scenario result lines, printed as they happen and again together at the end of the pytest run.

Under ``make chaos RUNS=N`` (pytest-repeat) every line starts with the scenario's run, ``run i/N``.
"""

from __future__ import annotations

import os
import re

LINES: list[str] = []

_REPEAT = re.compile(r"\[(?:[^\]]*-)?(\d+)-(\d+)\]")


def run_label() -> str:
    """``run i/N`` when pytest-repeat repeats the scenarios (its step is the test id's last ``-i-N``), else ``""``."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    match = _REPEAT.search(current.split(" ")[0])
    return f"run {match.group(1)}/{match.group(2)} " if match else ""


def report(line: str) -> None:
    """Print one scenario's result line now and keep it for the end-of-run summary."""
    line = run_label() + line
    LINES.append(line)
    print(line, flush=True)
