"""``LlmProxyTraceToTriplet``: triplets from the spans the LLM proxy (LiteLLM) records.

Upstream's rules (``agentlightning.adapter.triplet.LlmProxyTraceToTriplet``, 0.3.0): proxy spans
can come from machines with unsynchronized clocks, so ``sequence_id`` alone orders calls and
rewards (start time only breaks ties). A ``raw_gen_ai_request`` span gives token ids from the
provider's raw fields (``llm.<provider>.prompt_token_ids``, ``.response_token_ids``, else the first
choice's ``token_ids``), a ``litellm_request`` span from ``prompt_token_ids`` /
``response_token_ids``; a call needs both, and a response id seen before is the same call again.
Each reward, in sequence order, goes to the latest call with a smaller sequence id that has no
reward yet.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Mapping, Optional, Sequence

from agl_stream.adapter import llm_fields
from agl_stream.adapter.base import TraceAdapter
from agl_stream.adapter.rewards import reward_of
from agl_stream.types import Span, Triplet

RAW_REQUEST = "raw_gen_ai_request"
LITELLM_REQUEST = "litellm_request"
#: the span names upstream reads; a custom ``llm_call_match`` may add others (read like tracer LLM spans)
PROXY_LLM_SPAN_NAMES = rf"^({RAW_REQUEST}|{LITELLM_REQUEST})$"
_PROVIDER_KEY = re.compile(r"^llm\.([^.]+)\.(prompt_token_ids|response_token_ids|choices|id)$")


def _parse_structured(value: Any) -> Any:
    """Proxy attributes hold Python-literal (or JSON) text of lists and dicts."""
    if not isinstance(value, str):
        return value
    for parse in (ast.literal_eval, json.loads):
        try:
            return parse(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
    return None


def _ints(value: Any) -> list[int]:
    parsed = _parse_structured(value)
    if isinstance(parsed, list) and all(type(v) is int for v in parsed):
        return parsed
    return []


def _provider_fields(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``llm.<provider>.{prompt_token_ids,response_token_ids,choices,id}`` (LiteLLM's raw request
    record; upstream reads the ``hosted_vllm`` provider, any provider is read the same way here)."""
    fields: dict[str, Any] = {}
    for key, value in attributes.items():
        match = _PROVIDER_KEY.match(key)
        if match:
            fields.setdefault(match.group(2), value)
    return fields


def _raw_request_fields(attributes: Mapping[str, Any]) -> tuple[list[int], dict[str, Any], Optional[str]]:
    raw = _provider_fields(attributes)
    prompt = _ints(raw.get("prompt_token_ids"))
    response: dict[str, Any] = {"token_ids": []}
    nested = _parse_structured(raw.get("response_token_ids"))
    if isinstance(nested, list) and nested and isinstance(nested[0], list):
        response["token_ids"] = _ints(nested[0])
    choices = _parse_structured(raw.get("choices"))
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    if not response["token_ids"]:
        response["token_ids"] = _ints(choice.get("token_ids")) or _ints(
            (choice.get("provider_specific_fields") or {}).get("token_ids")
        )
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping) and isinstance(logprobs.get("content"), list):
        values = [c.get("logprob") for c in logprobs["content"] if isinstance(c, Mapping)]
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            response["logprobs"] = [float(v) for v in values]
    rid = raw.get("id")
    return prompt, response, rid if isinstance(rid, str) and rid else None


class LlmProxyTraceToTriplet(TraceAdapter[list[Triplet]]):
    """Experimental, like upstream: use when the tracer's spans lack token ids but the proxy's have them."""

    def __init__(self, llm_call_match: str = PROXY_LLM_SPAN_NAMES) -> None:
        self.llm_call_match = llm_call_match
        self._call_re = re.compile(llm_call_match)

    def _triplet(self, span: Span) -> Optional[Triplet]:
        attrs = span.attributes
        rid = attrs.get(llm_fields.semconv.GEN_AI_RESPONSE_ID)
        rid = rid if isinstance(rid, str) and rid else None
        if span.name == RAW_REQUEST:
            prompt, response, raw_rid = _raw_request_fields(attrs)
            rid = rid or raw_rid
        elif span.name == LITELLM_REQUEST:
            prompt = _ints(attrs.get(llm_fields.semconv.PROMPT_TOKEN_IDS))
            response = {"token_ids": _ints(attrs.get(llm_fields.semconv.RESPONSE_TOKEN_IDS))}
            rid = rid or _raw_request_fields(attrs)[2]
        else:  # a name added through llm_call_match: an LLM-call span like the tracers record
            prompt, response = llm_fields.prompt_token_ids(attrs), llm_fields.response_payload(attrs)
            rid = rid or llm_fields.response_id(attrs)
        if not prompt or not response["token_ids"]:
            return None  # e.g. a litellm_request span that only carries metadata
        logprobs = response.get("logprobs") or llm_fields.response_logprobs(attrs)
        if logprobs is not None:
            response["logprobs"] = logprobs
        return Triplet(
            prompt={"token_ids": prompt},
            response=response,
            policy_version=llm_fields.policy_version(attrs),
            metadata={"response_id": rid, "span_id": span.span_id, "sequence_id": span.sequence_id},
        )

    def adapt(self, source: Sequence[Span]) -> list[Triplet]:
        unique = list({span.span_id: span for span in reversed(source)}.values())  # a span delivered twice counts once
        spans = sorted(unique, key=lambda s: (s.sequence_id, s.start_time if s.start_time is not None else 0.0))
        calls: list[tuple[Span, Triplet]] = []
        seen_ids: set[str] = set()
        for span in spans:
            if not self._call_re.search(span.name):
                continue
            triplet = self._triplet(span)
            if triplet is None:
                continue
            rid = triplet.metadata["response_id"]
            if rid is not None:
                if rid in seen_ids:
                    continue  # the same completion recorded twice
                seen_ids.add(rid)
            calls.append((span, triplet))
        rewarded: set[int] = set()
        for span in spans:  # rewards in sequence order
            value = reward_of(span)
            if value is None:
                continue
            for index in range(len(calls) - 1, -1, -1):
                if index in rewarded or calls[index][0].sequence_id >= span.sequence_id:
                    continue
                calls[index][1].reward = value
                rewarded.add(index)
                break
        return [triplet for _, triplet in calls]

    def __repr__(self) -> str:
        return f"LlmProxyTraceToTriplet(llm_call_match={self.llm_call_match!r})"
