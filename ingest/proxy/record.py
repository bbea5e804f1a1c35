"""One LLM call -> one ``openai.chat.completion`` span, shaped like upstream's proxy spans.

Attribute names follow what upstream's tracers record and its triplet adapter reads (reference
§10): ``gen_ai.request.*``, ``gen_ai.prompt.<i>.{role,content}``, ``gen_ai.completion.<i>.*``,
``gen_ai.response.{id,model}``, ``gen_ai.usage.*`` and the integer arrays ``prompt_token_ids`` /
``response_token_ids``. Text completions (``/v1/completions``) get the same span name, told apart
by ``gen_ai.request.type``, so the adapter that matches ``openai.chat.completion`` trains on both.
Nothing from the request headers is recorded (they may carry keys).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from agl_stream import semconv
from agl_stream.ids import generate_span_id, generate_trace_id
from agl_stream.semconv import LightningResourceAttributes
from agl_stream.types import OtelResource, Span, SpanContext, TraceStatus
from agl_stream_ingest.proxy.capture import Completion, Kind

TRACER_NAME = "agl-stream.llm-proxy"
#: request parameters copied as ``gen_ai.request.<name>`` when present
REQUEST_PARAMS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "seed",
                  "presence_penalty", "frequency_penalty", "stop")


@dataclass
class LlmCall:
    """The facts of one proxied call, gathered by the app while it serves the request."""

    rollout_id: str
    attempt_id: str
    sequence_id: int
    kind: Kind
    request: Mapping[str, Any]
    provider: str
    streaming: bool
    start_time: float
    end_time: float
    completion: Optional[Completion] = None
    error: Optional[str] = None
    trace_id: Optional[str] = None
    parent_id: Optional[str] = None
    #: the API the agent spoke when it was not Chat Completions (``anthropic.messages``, ``openai.responses``)
    api: Optional[str] = None


def _text(value: Any) -> Any:
    """Message content as OTel can store it: strings stay, structured content becomes JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _request_attributes(call: LlmCall) -> dict[str, Any]:
    req = call.request
    attrs: dict[str, Any] = {
        semconv.GEN_AI_SYSTEM: call.provider,
        semconv.GEN_AI_REQUEST_TYPE: call.kind,
        semconv.GEN_AI_REQUEST_MODEL: req.get("model"),
        "gen_ai.request.streaming": call.streaming,
    }
    if call.api is not None:
        attrs["agl.proxy.api"] = call.api
    for name in REQUEST_PARAMS:
        if req.get(name) is not None:
            value = req[name]
            attrs[f"gen_ai.request.{name}"] = value if isinstance(value, (str, int, float, bool)) else _text(value)
    if req.get("tools"):
        attrs["gen_ai.request.tools"] = _text(req["tools"])
    if req.get("tool_choice") is not None:
        attrs["gen_ai.request.tool_choice"] = _text(req["tool_choice"])
    if req.get("response_format") is not None:
        attrs["gen_ai.request.response_format"] = _text(req["response_format"])
    if call.kind == "chat":
        for i, message in enumerate(req.get("messages") or []):
            prefix = f"gen_ai.prompt.{i}"
            attrs[f"{prefix}.role"] = message.get("role")
            if message.get("content") is not None:
                attrs[f"{prefix}.content"] = _text(message.get("content"))
            if message.get("tool_calls"):
                attrs[f"{prefix}.tool_calls"] = _text(message["tool_calls"])
            for key in ("tool_call_id", "name"):
                if message.get(key):
                    attrs[f"{prefix}.{key}"] = str(message[key])
    else:
        attrs["gen_ai.prompt.0.role"] = "user"
        attrs["gen_ai.prompt.0.content"] = _text(req.get("prompt"))
    return {k: v for k, v in attrs.items() if v is not None}


def _completion_attributes(completion: Completion) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if completion.response_id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = completion.response_id
    if completion.model:
        attrs[semconv.GEN_AI_RESPONSE_MODEL] = completion.model
    for key, value in completion.usage.items():
        attrs[f"gen_ai.usage.{key}"] = value
    for choice in completion.choices:
        prefix = f"gen_ai.completion.{choice.index}"
        attrs[f"{prefix}.role"] = choice.role or "assistant"
        attrs[f"{prefix}.content"] = choice.content
        if choice.finish_reason:
            attrs[f"{prefix}.finish_reason"] = choice.finish_reason
        if choice.tool_calls:
            attrs[f"{prefix}.tool_calls"] = _text(choice.tool_calls)
        if choice.index != 0 and choice.token_ids is not None:
            attrs[f"{prefix}.token_ids"] = choice.token_ids
    if completion.prompt_token_ids is not None:
        attrs[semconv.PROMPT_TOKEN_IDS] = completion.prompt_token_ids
    first = next((c for c in completion.choices if c.index == 0), None)
    if first is not None and first.token_ids is not None:
        attrs[semconv.RESPONSE_TOKEN_IDS] = first.token_ids
    if first is not None and first.logprobs is not None:
        attrs[semconv.RESPONSE_LOGPROBS] = first.logprobs
    if completion.policy_version is not None:
        attrs[semconv.POLICY_VERSION] = completion.policy_version
    return attrs


def build_llm_span(call: LlmCall) -> Span:
    """The span record of one call (successful or failed)."""
    attributes = _request_attributes(call)
    if call.completion is not None:
        attributes.update(_completion_attributes(call.completion))
    attributes["agl.llm.latency_ms"] = round((call.end_time - call.start_time) * 1000, 3)
    return proxy_span(
        call.rollout_id, call.attempt_id, call.sequence_id, semconv.LLM_CALL_SPAN_NAME, attributes,
        start_time=call.start_time, end_time=call.end_time, error=call.error, trace_id=call.trace_id,
        parent_id=call.parent_id, kind="CLIENT",
    )  # fmt: skip


def proxy_span(
    rollout_id: str,
    attempt_id: str,
    sequence_id: int,
    name: str,
    attributes: dict[str, Any],
    *,
    start_time: float,
    end_time: float,
    error: Optional[str] = None,
    trace_id: Optional[str] = None,
    parent_id: Optional[str] = None,
    kind: str = "INTERNAL",
) -> Span:
    """A span the proxy records for an attempt (a call, an agent's event), with the resource every reader keys on."""
    trace_id = trace_id or generate_trace_id()
    span_id = generate_span_id()
    status = TraceStatus(status_code="ERROR", description=error) if error else TraceStatus(status_code="OK")
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name=name,
        status=status,
        attributes=attributes,
        start_time=start_time,
        end_time=end_time,
        context=SpanContext(trace_id=trace_id, span_id=span_id),
        parent=SpanContext(trace_id=trace_id, span_id=parent_id, is_remote=True) if parent_id else None,
        resource=OtelResource(attributes={
            "service.name": "agl-stream-llm-proxy",
            LightningResourceAttributes.ROLLOUT_ID.value: rollout_id,
            LightningResourceAttributes.ATTEMPT_ID.value: attempt_id,
            LightningResourceAttributes.SPAN_SEQUENCE_ID.value: sequence_id,
            LightningResourceAttributes.TRACER_NAME.value: TRACER_NAME,
        }),
        kind=kind,
    )
