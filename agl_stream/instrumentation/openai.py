"""OpenTelemetry instrumentation of the OpenAI Python client that keeps vLLM token ids.

Upstream's default tracer instruments OpenAI calls and adds the token ids vLLM returns, so the
triplet adapter can train on exactly the tokens that were sampled (no re-tokenization drift).
This does the same with plain OpenTelemetry: each ``chat.completions.create`` becomes an
``openai.chat.completion`` span (kind CLIENT) with the GenAI attributes, ``prompt_token_ids``,
``response_token_ids``, ``response_logprobs`` and the serving policy version. Any tracer provider
captures it; under the agl tracer it lands on ``agl.spans`` with the attempt's ids.

``request_token_ids=True`` asks the server for them (``return_token_ids``, and ``logprobs``), which
vLLM and ``agl-stream serve`` understand; turn it off for providers that reject unknown fields.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

import agl_stream.semconv as semconv

_TRACER_NAME = "agl_stream.instrumentation.openai"
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def _extra(obj: Any, name: str) -> Any:
    """Read a non-standard field the server added (openai's models keep extras)."""
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
        if value is None:
            value = (extra.get("provider_specific_fields") or {}).get(name)
    return value


def _request_attributes(kwargs: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.GEN_AI_SYSTEM: "openai",
        semconv.GEN_AI_REQUEST_TYPE: "chat",
        semconv.GEN_AI_REQUEST_MODEL: str(kwargs.get("model", "")),
        "gen_ai.request.streaming": bool(kwargs.get("stream", False)),
    }
    for key in ("max_tokens", "temperature", "top_p"):
        if kwargs.get(key) is not None:
            attrs[f"gen_ai.request.{key}"] = kwargs[key]
    for i, message in enumerate(kwargs.get("messages") or []):
        message = dict(message) if not isinstance(message, dict) else message
        attrs[f"gen_ai.prompt.{i}.role"] = str(message.get("role", ""))
        content = message.get("content")
        attrs[f"gen_ai.prompt.{i}.content"] = content if isinstance(content, str) else json.dumps(content)
    if kwargs.get("tools"):
        attrs["gen_ai.request.tools"] = json.dumps(kwargs["tools"])
    return attrs


def _response_attributes(response: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.GEN_AI_RESPONSE_ID: str(getattr(response, "id", "") or ""),
        semconv.GEN_AI_RESPONSE_MODEL: str(getattr(response, "model", "") or ""),
    }
    usage = getattr(response, "usage", None)
    if usage is not None:
        attrs[semconv.GEN_AI_USAGE_PROMPT_TOKENS] = int(usage.prompt_tokens or 0)
        attrs[semconv.GEN_AI_USAGE_COMPLETION_TOKENS] = int(usage.completion_tokens or 0)
        attrs["gen_ai.usage.total_tokens"] = int(usage.total_tokens or 0)
    prompt_ids = _extra(response, "prompt_token_ids")
    if prompt_ids:
        attrs[semconv.PROMPT_TOKEN_IDS] = [int(t) for t in prompt_ids]
    version = _extra(response, "policy_version")
    if version is not None:
        attrs[semconv.POLICY_VERSION] = int(version)
    choices = getattr(response, "choices", None) or []
    if choices:
        choice = choices[0]
        message = getattr(choice, "message", None)
        attrs["gen_ai.completion.0.role"] = str(getattr(message, "role", "assistant") or "assistant")
        attrs["gen_ai.completion.0.content"] = str(getattr(message, "content", "") or "")
        attrs["gen_ai.completion.0.finish_reason"] = str(getattr(choice, "finish_reason", "") or "")
        tool_calls = getattr(message, "tool_calls", None)
        if tool_calls:
            attrs["gen_ai.completion.0.tool_calls"] = json.dumps([tc.model_dump() for tc in tool_calls])
        token_ids = _extra(choice, "token_ids")
        if token_ids:
            attrs[semconv.RESPONSE_TOKEN_IDS] = [int(t) for t in token_ids]
        logprobs = getattr(choice, "logprobs", None)
        content = getattr(logprobs, "content", None) if logprobs is not None else None
        if content:
            attrs[semconv.RESPONSE_LOGPROBS] = [float(item.logprob) for item in content]
    return attrs


def _prepare(kwargs: dict[str, Any], request_token_ids: bool) -> dict[str, Any]:
    if request_token_ids and not kwargs.get("stream"):
        extra_body = dict(kwargs.get("extra_body") or {})
        extra_body.setdefault("return_token_ids", True)
        kwargs = {**kwargs, "extra_body": extra_body}
        kwargs.setdefault("logprobs", True)
    return kwargs


def instrument_openai(request_token_ids: bool = True) -> None:
    """Patch the OpenAI client (sync and async chat completions); calling it twice is harmless."""
    from openai.resources.chat.completions import AsyncCompletions, Completions

    if "sync" in _ORIGINALS:
        return
    tracer = trace.get_tracer(_TRACER_NAME)
    sync_create, async_create = Completions.create, AsyncCompletions.create
    _ORIGINALS.update(sync=sync_create, async_=async_create)

    @functools.wraps(sync_create)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs = _prepare(kwargs, request_token_ids)
        with tracer.start_as_current_span(
            semconv.LLM_CALL_SPAN_NAME, kind=SpanKind.CLIENT, attributes=_request_attributes(kwargs)
        ) as span:
            response = sync_create(self, *args, **kwargs)
            if not kwargs.get("stream"):
                span.set_attributes(_response_attributes(response))
                span.set_status(Status(StatusCode.OK))
            return response

    @functools.wraps(async_create)
    async def acreate(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs = _prepare(kwargs, request_token_ids)
        with tracer.start_as_current_span(
            semconv.LLM_CALL_SPAN_NAME, kind=SpanKind.CLIENT, attributes=_request_attributes(kwargs)
        ) as span:
            response = await async_create(self, *args, **kwargs)
            if not kwargs.get("stream"):
                span.set_attributes(_response_attributes(response))
                span.set_status(Status(StatusCode.OK))
            return response

    Completions.create = create  # type: ignore[method-assign]
    AsyncCompletions.create = acreate  # type: ignore[method-assign]


def uninstrument_openai() -> None:
    from openai.resources.chat.completions import AsyncCompletions, Completions

    if "sync" in _ORIGINALS:
        Completions.create = _ORIGINALS.pop("sync")  # type: ignore[method-assign]
        AsyncCompletions.create = _ORIGINALS.pop("async_")  # type: ignore[method-assign]
