"""What a backend answered, normalized: text, tool calls, token ids, logprobs, usage, policy version.

The same :class:`Completion` comes out of a whole response and out of a stream of chunks, so the
span recorder has one input. Token ids follow vLLM's ``return_token_ids`` contract: prompt ids at
the top level (first chunk when streaming), completion ids per choice (litellm moves them to
``provider_specific_fields`` for chat responses; both places are read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional

logger = logging.getLogger(__name__)

Kind = Literal["chat", "completion"]

#: where a backend may report the policy (weights) version it served with
POLICY_VERSION_FIELDS = ("policy_version", "agl_policy_version")
POLICY_VERSION_HEADERS = ("x-policy-version", "x-agl-policy-version")


@dataclass
class ChoiceRecord:
    index: int
    role: Optional[str] = None
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: Optional[str] = None
    token_ids: Optional[list[int]] = None
    logprobs: Optional[list[Optional[float]]] = None


@dataclass
class Completion:
    response_id: Optional[str] = None
    model: Optional[str] = None
    choices: list[ChoiceRecord] = field(default_factory=list)
    prompt_token_ids: Optional[list[int]] = None
    usage: dict[str, int] = field(default_factory=dict)
    policy_version: Optional[int] = None


def _int_or_none(value: Any, where: str) -> Optional[int]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        logger.warning("ignoring non-integer policy version %r from %s", value, where)
        return None


def policy_version(doc: Mapping[str, Any], headers: Mapping[str, Any]) -> Optional[int]:
    """The version the backend says it served, from the body or a response header."""
    for name in POLICY_VERSION_FIELDS:
        if doc.get(name) is not None:
            return _int_or_none(doc[name], f"response field {name}")
    lowered = {str(k).lower(): v for k, v in headers.items()}
    for name in POLICY_VERSION_HEADERS:
        for key in (name, f"llm_provider-{name}"):
            if lowered.get(key) is not None:
                return _int_or_none(lowered[key], f"header {name}")
    return None


def _logprobs(raw: Any, kind: Kind) -> Optional[list[Optional[float]]]:
    if not isinstance(raw, Mapping):
        return None
    if kind == "chat":
        content = raw.get("content")
        if isinstance(content, list):
            return [float(item["logprob"]) for item in content if isinstance(item, Mapping) and "logprob" in item]
        return None
    values = raw.get("token_logprobs")
    # vLLM reports None for a token it has no logprob for (the first prompt token with echo).
    return [float(v) if v is not None else None for v in values] if isinstance(values, list) else None  # type: ignore[misc]


def _token_ids(choice: Mapping[str, Any]) -> Optional[list[int]]:
    ids = choice.get("token_ids")
    if ids is None:
        ids = (choice.get("provider_specific_fields") or {}).get("token_ids")
    return [int(i) for i in ids] if isinstance(ids, list) else None


def _usage(raw: Any) -> dict[str, int]:
    if not isinstance(raw, Mapping):
        return {}
    return {k: int(raw[k]) for k in ("prompt_tokens", "completion_tokens", "total_tokens") if isinstance(raw.get(k), int)}


def from_response(doc: Mapping[str, Any], kind: Kind, headers: Mapping[str, Any]) -> Completion:
    """Normalize a whole (non-streamed) chat or text completion response."""
    choices = []
    for position, choice in enumerate(doc.get("choices") or []):
        record = ChoiceRecord(index=int(choice.get("index", position)), finish_reason=choice.get("finish_reason"),
                              token_ids=_token_ids(choice), logprobs=_logprobs(choice.get("logprobs"), kind))
        if kind == "chat":
            message = choice.get("message") or {}
            record.role = message.get("role") or "assistant"
            record.content = message.get("content") or ""
            record.tool_calls = [dict(tc) for tc in message.get("tool_calls") or []]
        else:
            record.role = "assistant"
            record.content = choice.get("text") or ""
        choices.append(record)
    prompt_ids = doc.get("prompt_token_ids")
    return Completion(
        response_id=doc.get("id"),
        model=doc.get("model"),
        choices=choices,
        prompt_token_ids=[int(i) for i in prompt_ids] if isinstance(prompt_ids, list) else None,
        usage=_usage(doc.get("usage")),
        policy_version=policy_version(doc, headers),
    )


class StreamAccumulator:
    """Rebuilds the full answer from chat stream chunks while they are passed on to the client."""

    def __init__(self) -> None:
        self.completion = Completion()
        self._choices: dict[int, ChoiceRecord] = {}
        self._tool_calls: dict[int, dict[int, dict[str, Any]]] = {}
        self.chunks = 0

    def add(self, chunk: Mapping[str, Any]) -> None:
        self.chunks += 1
        c = self.completion
        c.response_id = c.response_id or chunk.get("id")
        c.model = c.model or chunk.get("model")
        if isinstance(chunk.get("prompt_token_ids"), list) and c.prompt_token_ids is None:
            c.prompt_token_ids = [int(i) for i in chunk["prompt_token_ids"]]
        for name in POLICY_VERSION_FIELDS:
            if chunk.get(name) is not None and c.policy_version is None:
                c.policy_version = _int_or_none(chunk[name], f"stream field {name}")
        if chunk.get("usage"):
            usage = _usage(chunk["usage"])
            if any(usage.values()):
                c.usage = usage
        for position, choice in enumerate(chunk.get("choices") or []):
            index = int(choice.get("index", position))
            record = self._choices.setdefault(index, ChoiceRecord(index=index))
            delta = choice.get("delta") or {}
            record.role = record.role or delta.get("role")
            record.content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                self._merge_tool_call(index, call)
            ids = _token_ids(choice)
            if ids:
                record.token_ids = (record.token_ids or []) + ids
            logprobs = _logprobs(choice.get("logprobs"), "chat")
            if logprobs:
                record.logprobs = (record.logprobs or []) + logprobs
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]

    def _merge_tool_call(self, choice_index: int, delta: Mapping[str, Any]) -> None:
        calls = self._tool_calls.setdefault(choice_index, {})
        call = calls.setdefault(int(delta.get("index") or 0), {"id": None, "type": "function",
                                                                 "function": {"name": "", "arguments": ""}})
        call["id"] = call["id"] or delta.get("id")
        call["type"] = delta.get("type") or call["type"]
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def result(self, headers: Mapping[str, Any]) -> Completion:
        c = self.completion
        for index, calls in self._tool_calls.items():
            self._choices[index].tool_calls = [calls[i] for i in sorted(calls)]
        c.choices = [self._choices[i] for i in sorted(self._choices)]
        for record in c.choices:
            record.role = record.role or "assistant"
        if c.policy_version is None:
            c.policy_version = policy_version({}, headers)
        return c
