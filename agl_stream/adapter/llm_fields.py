"""Where an LLM-call span keeps its token ids, logprobs, response id and policy version.

The lookup order is upstream's (first match wins), so spans from upstream tracers, the agl-stream
SDK, ``@operation``-wrapped calls and the LLM proxy all yield the same triplets. Attribute values
may be lists or, when a tracer had to stringify them, JSON text.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

import agl_stream.semconv as semconv

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
    return None


def response_id(attributes: Mapping[str, Any]) -> Optional[str]:
    for key in RESPONSE_ID_KEYS:
        value = attributes.get(key)
        if value is not None and value != "":
            return str(value)
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
