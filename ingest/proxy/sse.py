"""Server-sent events in the OpenAI streaming format."""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

DONE = b"data: [DONE]\n\n"


def event(doc: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def is_usage_only(chunk: Mapping[str, Any]) -> bool:
    """The trailing chunk that carries only usage (sent because the proxy always asks for it)."""
    if not chunk.get("usage"):
        return False
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("finish_reason") or any(v not in (None, "", [], {}) for v in delta.values()):
            return False
    return True


def completion_stream(doc: Mapping[str, Any], include_usage: bool) -> Iterator[bytes]:
    """A whole text completion re-emitted as a stream: one chunk per choice, usage, [DONE]."""
    base = {"id": doc.get("id"), "object": "text_completion", "created": doc.get("created"), "model": doc.get("model")}
    for choice in doc.get("choices") or []:
        yield event({**base, "choices": [choice]})
    if include_usage and doc.get("usage"):
        yield event({**base, "choices": [], "usage": doc["usage"]})
    yield DONE
