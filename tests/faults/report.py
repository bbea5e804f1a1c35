"""Scenario result lines, printed as they happen and again together at the end of the pytest run."""

from __future__ import annotations

LINES: list[str] = []


def report(line: str) -> None:
    """Print one scenario's result line now and keep it for the end-of-run summary."""
    LINES.append(line)
    print(line, flush=True)
