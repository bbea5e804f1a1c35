"""``LlmProxyTraceToTriplet``: triplets from the spans the LLM proxy (LiteLLM) records.

Proxy spans can come from machines with unsynchronized clocks, so only ``sequence_id`` orders them
(never timestamps), as upstream. Each chat completion that exposes token ids becomes a triplet; each
reward span goes to the most recent LLM call before it (by sequence id) that has no reward yet.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Mapping, Optional, Sequence

from agl_stream.adapter import llm_fields
from agl_stream.adapter.base import TraceAdapter, span_order_key
from agl_stream.adapter.rewards import reward_of
from agl_stream.types import Span, Triplet

#: LiteLLM's span names; ``raw_gen_ai_request`` carries the provider's raw fields (``llm.hosted_vllm.*``)
PROXY_LLM_SPAN_NAMES = r"^(raw_gen_ai_request|litellm_request|openai\.chat\.completion)$"


def _parse_structured(value: Any) -> Any:
    """Proxy attributes hold JSON or Python-literal text of lists/dicts."""
    if not isinstance(value, str):
        return value
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return None


def _provider_fields(attributes: Mapping[str, Any]) -> tuple[list[int], dict[str, Any], Optional[str]]:
    """Prompt ids, response payload and response id from ``llm.<provider>.*`` raw-request attributes."""
    prompt: list[int] = []
    response: dict[str, Any] = {"token_ids": []}
    rid: Optional[str] = None
    for key, value in attributes.items():
        if not key.startswith("llm."):
            continue
        if key.endswith(".prompt_token_ids") and not prompt:
            parsed = _parse_structured(value)
            if isinstance(parsed, list) and all(isinstance(v, int) for v in parsed):
                prompt = list(parsed)
        elif key.endswith(".choices") and not response["token_ids"]:
            parsed = _parse_structured(value)
            if isinstance(parsed, list) and parsed and isinstance(parsed[0], Mapping):
                choice = parsed[0]
                ids = choice.get("token_ids") or (choice.get("provider_specific_fields") or {}).get("token_ids")
                if isinstance(ids, list) and all(isinstance(v, int) for v in ids):
                    response["token_ids"] = list(ids)
                logprobs = choice.get("logprobs")
                if isinstance(logprobs, Mapping):
                    content = logprobs.get("content")
                    if isinstance(content, list):
                        values = [c.get("logprob") for c in content if isinstance(c, Mapping)]
                        if values and all(isinstance(v, (int, float)) for v in values):
                            response["logprobs"] = [float(v) for v in values]
        elif key.endswith(".id") and key.count(".") == 2 and rid is None and isinstance(value, str):
            rid = value
    return prompt, response, rid


class LlmProxyTraceToTriplet(TraceAdapter[list[Triplet]]):
    """Experimental, like upstream: use when the tracer's spans lack token ids but the proxy's have them."""

    def __init__(self, llm_call_match: str = PROXY_LLM_SPAN_NAMES) -> None:
        self.llm_call_match = llm_call_match
        self._call_re = re.compile(llm_call_match)

    def _triplet(self, span: Span) -> Optional[Triplet]:
        attrs = span.attributes
        prompt = llm_fields.prompt_token_ids(attrs)
        response = llm_fields.response_payload(attrs)
        rid = llm_fields.response_id(attrs)
        if not prompt or not response["token_ids"]:
            raw_prompt, raw_response, raw_rid = _provider_fields(attrs)
            prompt = prompt or raw_prompt
            if not response["token_ids"]:
                response = raw_response
            rid = rid or raw_rid
        if not prompt or not response["token_ids"]:
            return None  # e.g. a litellm_request span that only carries metadata
        return Triplet(
            prompt={"token_ids": prompt},
            response=response,
            policy_version=llm_fields.policy_version(attrs),
            metadata={"response_id": rid, "span_id": span.span_id, "sequence_id": span.sequence_id},
        )

    def adapt(self, source: Sequence[Span]) -> list[Triplet]:
        triplets: list[Triplet] = []
        seen_ids: set[str] = set()
        for span in sorted(source, key=span_order_key):
            value = reward_of(span)
            if value is not None:
                for triplet in reversed(triplets):
                    if triplet.metadata["sequence_id"] >= span.sequence_id:
                        continue
                    if triplet.reward is None:
                        triplet.reward = value
                        break
                continue
            if not self._call_re.search(span.name):
                continue
            triplet = self._triplet(span)
            if triplet is None:
                continue
            rid = triplet.metadata["response_id"]
            if rid is not None:
                if rid in seen_ids:
                    continue  # the same completion seen by two proxy spans
                seen_ids.add(rid)
            triplets.append(triplet)
        return triplets

    def __repr__(self) -> str:
        return f"LlmProxyTraceToTriplet(llm_call_match={self.llm_call_match!r})"
