"""A scripted LLM for the multi-turn tasks' protocol tests: says the given replies in order, and records each prompt."""

from __future__ import annotations

from typing import Any, Callable


def scripted(*replies: str) -> tuple[Callable[[list[dict[str, Any]]], str], list[list[dict[str, Any]]]]:
    """An ``ask(messages)`` that returns ``replies`` in order, and the conversations it was shown (copied per call)."""
    seen: list[list[dict[str, Any]]] = []

    def ask(messages: list[dict[str, Any]]) -> str:
        seen.append([dict(m) for m in messages])
        return replies[len(seen) - 1]

    return ask, seen
