"""The other APIs agents speak, served over the chat path: Anthropic Messages and OpenAI Responses.

Every call still goes to the backend as a chat completion, so it is recorded like any other (a chat
span with the prompt's and the response's token ids, its policy version) and the adapters and the
learner see one shape. A dialect translates three things, with litellm's own adapters (the ones its
proxy serves these APIs with): the request into a chat request, the chat answer back into the
dialect's answer, and a chat stream into the dialect's server-sent events.

Stateless by design: the Responses API's server-side conversation state (``previous_response_id``,
``conversation``, ``background``) is refused with a clear 400; agents send the whole input each time,
as harnesses with ``store: false`` do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping, Protocol

from fastapi import HTTPException
from fastapi.responses import JSONResponse

from agl_stream_ingest.proxy.backend import CHAT_PARAMS


class Dialect(Protocol):
    """An API served over the chat path; one instance per call (it keeps what the answer needs)."""

    #: the span attribute ``agl.proxy.api`` and the log's name for it
    api: str

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat request for ``body`` (raises HTTPException 400 for what it cannot serve)."""

    def answer(self, response: Any) -> dict[str, Any]:
        """The dialect's answer for a chat ``response`` (litellm's ModelResponse)."""

    def stream(self, chunks: AsyncIterator[Any], model: str) -> AsyncIterator[bytes]:
        """The dialect's server-sent events for a stream of chat chunks (litellm's ModelResponseStream)."""

    def error(self, status: int, message: str) -> JSONResponse:
        """An error answer in the dialect's shape."""

    def stream_error(self, status: int, message: str) -> bytes:
        """An error event in the dialect's stream."""


def _chat_request(translated: Mapping[str, Any], model: str, stream: bool) -> dict[str, Any]:
    """The translated fields a chat request carries (litellm's translations add routing keys of its own)."""
    body = {k: v for k, v in translated.items() if k in CHAT_PARAMS and v is not None}
    messages = translated.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPException(400, "the request has no messages to send to the model")
    body.update(model=model, messages=[dict(m) for m in messages], stream=stream)
    return body


def _sse(event_type: str, doc: Mapping[str, Any]) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(doc, separators=(',', ':'))}\n\n".encode()


@dataclass
class AnthropicMessages:
    """``POST /v1/messages`` (the Anthropic SDK's ``ANTHROPIC_BASE_URL`` + ``/v1/messages``)."""

    api: str = "anthropic.messages"
    tool_names: dict[str, str] = field(default_factory=dict)  # tool names litellm shortened, to restore them

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        from litellm.llms.anthropic.pass_through.adapters.transformation import AnthropicAdapter

        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise HTTPException(400, "'messages' must be a non-empty list of message objects")
        if not isinstance(body.get("max_tokens"), int):
            raise HTTPException(400, "'max_tokens' is required (an integer), as the Messages API asks")
        try:
            translated, self.tool_names = AnthropicAdapter().translate_completion_input_params_with_tool_mapping(dict(body))
        except (ValueError, TypeError, KeyError) as exc:
            raise HTTPException(400, f"this Messages request cannot be served: {exc}") from None
        return _chat_request(translated or {}, body["model"], bool(body.get("stream")))

    def answer(self, response: Any) -> dict[str, Any]:
        from litellm.llms.anthropic.pass_through.adapters.transformation import AnthropicAdapter

        translated = AnthropicAdapter().translate_completion_output_params(response, self.tool_names)
        return dict(translated or {})

    async def stream(self, chunks: AsyncIterator[Any], model: str) -> AsyncIterator[bytes]:
        from litellm.llms.anthropic.pass_through.adapters.transformation import AnthropicAdapter

        events = AnthropicAdapter().translate_completion_output_params_streaming(chunks, model, self.tool_names)
        async for event in events:  # type: ignore[union-attr]
            yield event

    def error(self, status: int, message: str) -> JSONResponse:
        return JSONResponse({"type": "error", "error": {"type": _anthropic_error_type(status), "message": message}},
                            status_code=status)  # fmt: skip

    def stream_error(self, status: int, message: str) -> bytes:
        return _sse("error", {"type": "error", "error": {"type": _anthropic_error_type(status), "message": message}})


def _anthropic_error_type(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
            413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}.get(status, "api_error")  # fmt: skip


#: Responses API fields that ask for state kept by the server between calls; this gateway keeps none
_STATEFUL_FIELDS = ("previous_response_id", "conversation", "background")


@dataclass
class OpenAIResponses:
    """``POST /v1/responses`` (the OpenAI SDK's ``client.responses.create``)."""

    api: str = "openai.responses"
    request_input: Any = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        from litellm.responses.litellm_completion_transformation.transformation import (
            LiteLLMCompletionResponsesConfig,
        )

        for name in _STATEFUL_FIELDS:
            if body.get(name):
                raise HTTPException(400, f"'{name}' is not supported: this gateway keeps no conversation state; "
                                         "send the whole input each time (store: false)")  # fmt: skip
        if not isinstance(body.get("input"), (str, list)) or not body.get("input"):
            raise HTTPException(400, "'input' is required (a string or a list of input items)")
        self.request_input = body["input"]
        self.options = {k: v for k, v in body.items() if k not in ("model", "input", "stream")}
        try:
            translated = LiteLLMCompletionResponsesConfig.transform_responses_api_request_to_chat_completion_request(
                model=body["model"], input=self.request_input, responses_api_request=self.options,
                custom_llm_provider="openai", stream=bool(body.get("stream")))  # fmt: skip
        except (ValueError, TypeError, KeyError) as exc:
            raise HTTPException(400, f"this Responses request cannot be served: {exc}") from None
        return _chat_request(translated, body["model"], bool(body.get("stream")))

    def answer(self, response: Any) -> dict[str, Any]:
        from litellm.responses.litellm_completion_transformation.transformation import (
            LiteLLMCompletionResponsesConfig,
        )

        translated = LiteLLMCompletionResponsesConfig.transform_chat_completion_response_to_responses_api_response(
            request_input=self.request_input, responses_api_request=self.options, chat_completion_response=response)  # fmt: skip
        return translated.model_dump(exclude_none=True)  # type: ignore[no-any-return]

    async def stream(self, chunks: AsyncIterator[Any], model: str) -> AsyncIterator[bytes]:
        from litellm.responses.litellm_completion_transformation.streaming_iterator import (
            LiteLLMCompletionStreamingIterator,
        )

        events = LiteLLMCompletionStreamingIterator(model=model, litellm_custom_stream_wrapper=chunks,  # type: ignore[arg-type]
                                                    request_input=self.request_input,
                                                    responses_api_request=self.options, custom_llm_provider="openai")  # fmt: skip
        async for event in events:
            doc = event.model_dump(exclude_none=True) if hasattr(event, "model_dump") else dict(event)
            yield _sse(str(doc.get("type", "message")), doc)

    def error(self, status: int, message: str) -> JSONResponse:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    def stream_error(self, status: int, message: str) -> bytes:
        return _sse("error", {"type": "error", "code": str(status), "message": message, "param": None})
