"""Where an LLM-call span keeps its token ids, logprobs, response id, policy version and messages.

The lookup order is upstream's (first match wins), so spans from upstream tracers, the agl-stream
SDK, ``@operation``-wrapped calls and the LLM proxy all yield the same triplets. Token-id values
may be lists or, when a tracer had to stringify them, JSON text (upstream reads lists only).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

import agl_stream.semconv as semconv
from agl_stream.adapter.attributes import Nested, first_unflattened

_OUT = "agentlightning.operation.output"

PROMPT_TOKEN_ID_KEYS: tuple[str, ...] = (semconv.PROMPT_TOKEN_IDS, f"{_OUT}.prompt_token_ids")
RESPONSE_TOKEN_ID_KEYS: tuple[str, ...] = (
    semconv.RESPONSE_TOKEN_IDS,
    f"{_OUT}.response_token_ids.0",
    f"{_OUT}.choices.0.token_ids",
    f"{_OUT}.choices.0.provider_specific_fields.token_ids",
)
RESPONSE_ID_KEYS: tuple[str, ...] = (semconv.GEN_AI_RESPONSE_ID, f"{_OUT}.id")
LOGPROB_KEYS: tuple[str, ...] = (
    semconv.RESPONSE_LOGPROBS,
    f"{_OUT}.response_logprobs.0",
    f"{_OUT}.response_logprobs",
    f"{_OUT}.choices.0.logprobs.token_logprobs",
)
#: upstream's AgentOps patch stores the first choice's ``logprobs.content`` here as JSON text
LOGPROBS_CONTENT_KEY = "logprobs.content"
#: (request, response, prompt messages, completion choices): the first non-empty prefix wins
REQUEST_PREFIXES: tuple[str, ...] = ("gen_ai.request", "agentlightning.operation.input")
RESPONSE_PREFIXES: tuple[str, ...] = ("gen_ai.response", _OUT)
PROMPT_PREFIXES: tuple[str, ...] = ("gen_ai.prompt", "agentlightning.operation.input.messages")
COMPLETION_PREFIXES: tuple[str, ...] = ("gen_ai.completion", f"{_OUT}.choices")
POLICY_VERSION_KEYS: tuple[str, ...] = (semconv.POLICY_VERSION, f"{_OUT}.policy_version")


def _as_list(value: Any) -> Optional[list[Any]]:
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    return None


_INT = frozenset({int})
_NUMBER = frozenset({int, float})


def _int_list(value: Any) -> Optional[list[int]]:
    # type() rather than isinstance(): excludes bool, and set(map(type, ...)) runs in C (token lists are long)
    items = _as_list(value)
    if items is None or not set(map(type, items)) <= _INT:
        return None
    return items


def _float_list(value: Any) -> Optional[list[float]]:
    items = _as_list(value)
    if items is None or not set(map(type, items)) <= _NUMBER:
        return None
    return [float(v) for v in items]


def first_int_list(attributes: Mapping[str, Any], keys: Sequence[str]) -> Optional[list[int]]:
    for key in keys:
        if key in attributes:
            found = _int_list(attributes[key])
            if found is not None:
                return found
    return None


def prompt_token_ids(attributes: Mapping[str, Any]) -> list[int]:
    return first_int_list(attributes, PROMPT_TOKEN_ID_KEYS) or []


def response_token_ids(attributes: Mapping[str, Any]) -> list[int]:
    return first_int_list(attributes, RESPONSE_TOKEN_ID_KEYS) or []


def response_logprobs(attributes: Mapping[str, Any]) -> Optional[list[float]]:
    for key in LOGPROB_KEYS:
        if key in attributes:
            found = _float_list(attributes[key])
            if found is not None:
                return found
    return _content_logprobs(attributes.get(LOGPROBS_CONTENT_KEY))


def _content_logprobs(value: Any) -> Optional[list[float]]:
    """``[{"token": .., "logprob": -0.5, ...}, ...]`` (OpenAI's choice logprobs) -> ``[-0.5, ...]``."""
    entries = _as_list(value)
    if not entries or not all(isinstance(e, Mapping) for e in entries):
        return None
    return _float_list([e.get("logprob") for e in entries])


def response_id(attributes: Mapping[str, Any]) -> Optional[str]:
    """The first response id that is text (upstream skips a key whose value is not a string).

    An empty id counts as none: upstream would take ``""`` for an id and merge every such call
    into one (its instrumentations never record an empty id; agl-stream's records one when the
    server sent none).
    """
    for key in RESPONSE_ID_KEYS:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def policy_version(attributes: Mapping[str, Any]) -> Optional[int]:
    for key in POLICY_VERSION_KEYS:
        value = attributes.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
    return None


def response_payload(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The triplet ``response`` dict: token ids, plus logprobs when the span recorded them."""
    payload: dict[str, Any] = {"token_ids": response_token_ids(attributes)}
    logprobs = response_logprobs(attributes)
    if logprobs is not None:
        payload["logprobs"] = logprobs
    return payload


# ---------------------------------------------------------------------------------------------- messages


def request_metadata(attributes: Mapping[str, Any]) -> Optional[Nested]:
    """The request's parameters (``gen_ai.request.*``) without its messages."""
    found = first_unflattened(attributes, REQUEST_PREFIXES)
    if isinstance(found, dict):
        found.pop("messages", None)
    return found


def response_metadata(attributes: Mapping[str, Any]) -> Optional[Nested]:
    """The response's fields (``gen_ai.response.*``: id, model, ...) without choices or token ids."""
    found = first_unflattened(attributes, RESPONSE_PREFIXES)
    if isinstance(found, dict):
        for key in ("choices", "prompt_token_ids", "response_token_ids"):
            found.pop(key, None)
    return found


def prompt_messages(attributes: Mapping[str, Any]) -> Optional[Nested]:
    return first_unflattened(attributes, PROMPT_PREFIXES)


def completion_choices(attributes: Mapping[str, Any]) -> Optional[Nested]:
    return first_unflattened(attributes, COMPLETION_PREFIXES)


def image_urls(messages: Any) -> list[str]:
    """``image_url`` parts of the prompt messages, in order (message content may be JSON text)."""
    if isinstance(messages, Mapping):
        numbered = sorted((k for k in messages if isinstance(k, str) and k.isdigit()), key=int)
        entries = [messages[k] for k in numbered] if numbered else [messages]
    elif isinstance(messages, list):
        entries = messages
    else:
        return []
    urls: list[str] = []
    for message in entries:
        if not isinstance(message, Mapping) or "content" not in message:
            continue
        content = message["content"]
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except ValueError:
                continue
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "image_url":
                image = part.get("image_url")
                if isinstance(image, Mapping) and "url" in image:
                    urls.append(image["url"])
    return urls
