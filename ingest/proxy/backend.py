"""The litellm side of the proxy: a Router over the model list, request shaping, error mapping.

Requests are shaped the way upstream's proxy callbacks shaped them: ``return_token_ids`` for
vLLM-compatible backends and ``logprobs`` when configured. Parameters OpenAI does not define (vLLM's
``top_k``, ``return_token_ids`` sent by the client itself, ...) travel in ``extra_body`` so litellm
forwards them instead of refusing them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the cost map from the internet

import litellm  # noqa: E402  (after the environment default above)
from litellm import Router  # noqa: E402

from agl_stream_ingest.proxy.capture import Kind  # noqa: E402
from agl_stream_ingest.proxy.config import ModelConfig, ProxyConfig  # noqa: E402

logger = logging.getLogger(__name__)

litellm.suppress_debug_info = True
litellm.telemetry = False
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
    logging.getLogger(_name).setLevel(logging.WARNING)  # its DEBUG/INFO lines echo request parameters

CHAT_PARAMS = frozenset({
    "temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "seed", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "logprobs", "top_logprobs", "reasoning_effort", "metadata",
})
COMPLETION_PARAMS = frozenset({
    "temperature", "top_p", "n", "stop", "max_tokens", "presence_penalty", "frequency_penalty",
    "logit_bias", "user", "seed", "logprobs", "echo", "best_of", "suffix",
})
#: handled by the proxy itself, never forwarded as given
OWN_FIELDS = frozenset({"model", "messages", "prompt", "stream", "stream_options", "extra_body"})
#: body fields that would choose credentials or endpoints; backends come from the config only
REFUSED_FIELDS = frozenset({"api_key", "api_base", "base_url", "headers", "extra_headers", "api_version"})


def make_router(config: ProxyConfig, timeout: float) -> Router:
    return Router(
        model_list=[{"model_name": m.model_name, "litellm_params": dict(m.litellm_params)} for m in config.model_list],
        num_retries=config.num_retries,
        timeout=timeout,
    )


@dataclass
class BackendRequest:
    """Keyword arguments for ``Router.acompletion`` / ``Router.atext_completion``."""

    kwargs: dict[str, Any]
    client_asked_logprobs: bool


def shape_request(body: Mapping[str, Any], kind: Kind, model: ModelConfig, config: ProxyConfig,
                  *, stream: bool, timeout: float) -> BackendRequest:
    known = CHAT_PARAMS if kind == "chat" else COMPLETION_PARAMS
    kwargs: dict[str, Any] = {"model": model.model_name, "timeout": timeout, "stream": stream}
    extra: dict[str, Any] = dict(body.get("extra_body") or {})
    for key, value in body.items():
        if key in OWN_FIELDS:
            continue
        if key in REFUSED_FIELDS:
            logger.warning("dropped request field %r: backends and their credentials come from the proxy config", key)
            continue
        (kwargs if key in known else extra)[key] = value
    if kind == "chat":
        kwargs["messages"] = body["messages"]
        # litellm routes any request with tools through its MCP gateway, which needs the optional
        # 'mcp' package; this proxy forwards tools to the backend as plain OpenAI tools.
        kwargs["_skip_mcp_handler"] = True
        if stream:
            kwargs["stream_options"] = {"include_usage": True}  # usage is recorded even if the client did not ask
    else:
        kwargs["prompt"] = body["prompt"]
    ceiling = model.max_tokens
    if ceiling is not None:
        asked = [key for key in ("max_tokens", "max_completion_tokens") if kwargs.get(key) is not None]
        for key in asked:
            kwargs[key] = min(int(kwargs[key]), ceiling)
        if not asked:
            kwargs["max_tokens"] = ceiling
    client_asked_logprobs = bool(kwargs.get("logprobs"))
    if config.logprobs is not None and not client_asked_logprobs:
        if kind == "chat":
            kwargs["logprobs"] = True
            if config.logprobs > 0:
                kwargs["top_logprobs"] = config.logprobs
        else:
            kwargs["logprobs"] = config.logprobs
    if config.return_token_ids and model.asks_token_ids:
        extra.setdefault("return_token_ids", True)
    if extra:
        kwargs["extra_body"] = extra
    return BackendRequest(kwargs=kwargs, client_asked_logprobs=client_asked_logprobs)


async def call_backend(router: Router, kind: Kind, request: BackendRequest) -> Any:
    if kind == "chat":
        return await router.acompletion(**request.kwargs)
    return await router.atext_completion(**request.kwargs)


def response_headers(response: Any) -> dict[str, Any]:
    """The backend's HTTP response headers as litellm kept them (policy versions may travel there)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    headers: dict[str, Any] = {}
    headers.update(hidden.get("additional_headers") or {})
    headers.update(hidden.get("headers") or {})
    return headers


#: backend statuses that describe the client's request and are passed on as they are
_CLIENT_STATUSES = frozenset({400, 404, 413, 422, 429})


def error_status(exc: BaseException) -> int:
    """HTTP status for the client when the backend call failed."""
    if isinstance(exc, litellm.Timeout):
        return 504
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status in _CLIENT_STATUSES:
        return status
    return 502


def error_message(exc: BaseException) -> str:
    """The backend's reason, without anything litellm may append about credentials or URLs."""
    message = str(getattr(exc, "message", None) or exc)
    return f"backend error ({type(exc).__name__}): {message[:500]}"
