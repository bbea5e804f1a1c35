"""LiteLLM SDK calls (``litellm.completion`` / ``acompletion``, streamed or not) as exactly one LLM call each.

``openinference-instrumentation-litellm`` records a ``completion`` / ``acompletion`` LLM span per call. For
OpenAI-compatible providers (``openai/<model>`` with ``api_base``) litellm sends the request with the openai
client, so the OpenAI instrumentation records the same call again, as a child ``ChatCompletion`` span: two
LLM spans for one call. The LLM-call span (``openai.chat.completion``, one triplet) is:

* **the inner OpenAI span, when there is one.** It holds the exchange with the server as it happened: the
  request litellm actually sent (after its own rewriting) and the response as the server sent it, token ids
  included (asked for by :mod:`agl_stream.instrumentation.openai`). It is also what upstream records for a
  litellm agent (its AgentOps tracer instruments the openai client, not litellm). The litellm span stays a
  plain OpenInference LLM span, which the triplet adapter does not match.
* **the litellm span otherwise.** Providers that litellm calls with its own HTTP client (``hosted_vllm/``,
  the prefix upstream's proxy configs use, ``anthropic/``, ...) leave no other record. OpenInference keeps
  only the text of such a call, so :class:`LiteLLMInstrumentor` records the OpenAI-shaped request and
  litellm's response on it (``agl.litellm.request`` / ``agl.litellm.response``; streamed, the chunks
  accumulated when the stream is read to its end) and :mod:`~agl_stream.instrumentation.conventions` maps it
  like an OpenAI call. Token ids are what litellm passes on: vLLM's ``prompt_token_ids`` and each choice's
  ``token_ids`` (litellm 1.106 drops ``prompt_token_ids`` from ``hosted_vllm`` streams). Calls to the
  vLLM-compatible providers (``hosted_vllm``, ``openai``) ask for them, ``return_token_ids`` as the OpenAI
  patch does (``AGL_REQUEST_TOKEN_IDS=0`` turns both off).

Which case applies is decided during the call: a span processor sees an OpenAI ``ChatCompletion`` span start
inside a litellm call (a context variable the wrapper sets) and marks that call, and every litellm call
around it, delegated; the wrapper then records nothing. A litellm call inside another one (fallbacks,
retries) that records itself marks the outer ones the same way.
"""

from __future__ import annotations

import functools
import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Optional

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from agl_stream.instrumentation._extension import OpenInferenceExtension
from agl_stream.instrumentation.conventions import LITELLM_REQUEST, LITELLM_RESPONSE, OPENAI_CHAT_SPANS

logger = logging.getLogger(__name__)

OPENAI_SCOPE = "openinference.instrumentation.openai"
LITELLM_SCOPE = "openinference.instrumentation.litellm"
#: litellm providers that speak vLLM's ``return_token_ids`` (the agl proxy's list, less the in-process ``vllm``)
TOKEN_ID_PROVIDERS = frozenset({"hosted_vllm", "openai"})
WRAPPED = ("completion", "acompletion")  # what OpenInference wraps for chat calls
_REQUEST_KEYS = ("tools", "tool_choice", "max_tokens", "temperature", "top_p", "stream")


@dataclass
class _Call:
    """One litellm call in progress; ``delegated`` once another span records it."""

    outer: Optional["_Call"]
    delegated: bool = False

    def delegate(self) -> None:
        call: Optional[_Call] = self
        while call is not None:
            call.delegated = True
            call = call.outer


_CALL: ContextVar[Optional[_Call]] = ContextVar("agl_litellm_call", default=None)


class _DelegationMarker(SpanProcessor):
    """Marks the litellm calls in progress delegated when an OpenAI chat span starts inside them."""

    active = False

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        call = _CALL.get()
        if call is None or not self.active or span.name not in OPENAI_CHAT_SPANS:
            return
        if getattr(getattr(span, "instrumentation_scope", None), "name", None) == OPENAI_SCOPE:
            call.delegate()

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_ORIGINALS: dict[str, Callable[..., Any]] = {}  # litellm's functions our wrappers replaced, while instrumented


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else repr(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_jsonable, ensure_ascii=False)


def _provider(model: Any, kwargs: Mapping[str, Any]) -> Optional[str]:
    try:
        import litellm

        return str(litellm.get_llm_provider(model=str(model), custom_llm_provider=kwargs.get("custom_llm_provider"),
                                            api_base=kwargs.get("api_base"))[1])  # fmt: skip
    except Exception:  # an unknown model: litellm will say so itself
        return None


def _with_token_ids(model: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    if _provider(model, kwargs) not in TOKEN_ID_PROVIDERS:
        return kwargs
    extra_body = dict(kwargs.get("extra_body") or {})
    extra_body.setdefault("return_token_ids", True)
    return {**kwargs, "extra_body": extra_body}


def _request_doc(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call as an OpenAI chat request (``completion(model, messages, ...)``; positional or not)."""
    doc: dict[str, Any] = {"model": kwargs.get("model", args[0] if args else ""),
                           "messages": kwargs.get("messages", args[1] if len(args) > 1 else [])}  # fmt: skip
    doc.update({key: kwargs[key] for key in _REQUEST_KEYS if kwargs.get(key) is not None})
    return doc


def _litellm_span() -> Any:
    """The span OpenInference opened for this call (current inside its wrapper), or None."""
    span = otel_trace.get_current_span()
    scope = getattr(getattr(span, "instrumentation_scope", None), "name", None)
    return span if scope == LITELLM_SCOPE and span.is_recording() else None


class _StreamRecord:
    """A litellm stream's chunks accumulated into one chat completion (vLLM token ids included)."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self.doc: dict[str, Any] = {"id": None, "model": None}
        self.message: dict[str, Any] = {"role": "assistant", "content": ""}
        self.choice: dict[str, Any] = {"index": 0, "message": self.message, "finish_reason": None}
        self.calls: dict[int, dict[str, Any]] = {}
        self.token_ids: list[int] = []

    def add(self, chunk: Any) -> None:
        data = chunk.model_dump() if hasattr(chunk, "model_dump") else dict(chunk)
        self.doc["id"] = self.doc["id"] or data.get("id")
        self.doc["model"] = self.doc["model"] or data.get("model")
        for key in ("prompt_token_ids", "usage", "policy_version"):
            if data.get(key) is not None and self.doc.get(key) is None:
                self.doc[key] = data[key]
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            self.message["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                empty = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                merged = self.calls.setdefault(int(call.get("index") or 0), empty)
                merged["id"] = call.get("id") or merged["id"]
                function = call.get("function") or {}
                merged["function"]["name"] = function.get("name") or merged["function"]["name"]
                merged["function"]["arguments"] += function.get("arguments") or ""
            ids = choice.get("token_ids") or (choice.get("provider_specific_fields") or {}).get("token_ids")
            if isinstance(ids, list):
                self.token_ids += ids
            self.choice["finish_reason"] = choice.get("finish_reason") or self.choice["finish_reason"]

    def finish(self) -> None:
        if self.calls:
            self.message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        if self.token_ids:
            self.choice["token_ids"] = self.token_ids
        try:
            self.span.set_attribute(LITELLM_RESPONSE, _dumps({**self.doc, "choices": [self.choice]}))
        except Exception:  # recording must never break the agent's stream
            logger.exception("could not record a litellm stream")


_RECORDING_CLASSES: dict[type, type] = {}


def _recording(stream: Any, span: Any) -> Any:
    """Make ``stream`` (litellm's ``CustomStreamWrapper``, which OpenInference checks by type) record its chunks:
    its class becomes a subclass whose ``__next__`` / ``__anext__`` also feed a :class:`_StreamRecord`."""
    base = type(stream)
    recording = _RECORDING_CLASSES.get(base)
    if recording is None:

        def __next__(self: Any) -> Any:
            try:
                chunk = base.__next__(self)
            except StopIteration:
                self._agl_record.finish()
                raise
            self._agl_record.add(chunk)
            return chunk

        async def __anext__(self: Any) -> Any:
            try:
                chunk = await base.__anext__(self)
            except StopAsyncIteration:
                self._agl_record.finish()
                raise
            self._agl_record.add(chunk)
            return chunk

        recording = type(base.__name__, (base,), {"__next__": __next__, "__anext__": __anext__,
                                                  "__module__": base.__module__})  # fmt: skip
        _RECORDING_CLASSES[base] = recording
    try:
        stream._agl_record = _StreamRecord(span)
        stream.__class__ = recording
    except TypeError:
        logger.warning("cannot record a %s stream: its call is not traced as an LLM call", base.__name__)
    return stream


def _record(span: Any, call: _Call, request: dict[str, Any], result: Any) -> Any:
    """After the call: record it on the litellm span unless an inner span recorded it."""
    if span is None or call.delegated:
        return result
    try:
        from litellm import CustomStreamWrapper, ModelResponse

        if isinstance(result, ModelResponse):
            span.set_attribute(LITELLM_RESPONSE, result.model_dump_json())
        elif isinstance(result, CustomStreamWrapper):
            _recording(result, span)
        else:
            return result
        span.set_attribute(LITELLM_REQUEST, _dumps(request))
        if call.outer is not None:
            call.outer.delegate()
    except Exception:
        logger.exception("could not record a litellm call")
    return result


def _wrap(original: Callable[..., Any], is_async: bool, ask_token_ids: bool) -> Callable[..., Any]:
    """``original`` inside a :class:`_Call` (for the marker), asking for token ids, recording when it should."""
    if is_async:

        @functools.wraps(original)
        async def acompletion(*args: Any, **kwargs: Any) -> Any:
            if ask_token_ids:
                kwargs = _with_token_ids(kwargs.get("model", args[0] if args else ""), kwargs)
            call, span = _Call(_CALL.get()), _litellm_span()
            token = _CALL.set(call)
            try:
                result = await original(*args, **kwargs)
            finally:
                _CALL.reset(token)
            return _record(span, call, _request_doc(args, kwargs), result)

        return acompletion

    @functools.wraps(original)
    def completion(*args: Any, **kwargs: Any) -> Any:
        if ask_token_ids:
            kwargs = _with_token_ids(kwargs.get("model", args[0] if args else ""), kwargs)
        call, span = _Call(_CALL.get()), _litellm_span()
        token = _CALL.set(call)
        try:
            result = original(*args, **kwargs)
        finally:
            _CALL.reset(token)
        return _record(span, call, _request_doc(args, kwargs), result)

    return completion


class LiteLLMInstrumentor(OpenInferenceExtension):
    """OpenInference's litellm instrumentation plus the recording and the delegation rule of the module doc.

    The registry (:mod:`agl_stream.instrumentation`) instruments it when the agent imports ``litellm``."""

    library = "litellm"
    openinference = "openinference.instrumentation.litellm:LiteLLMInstrumentor"
    processor = _DelegationMarker()

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("litellm >= 1.0",)

    def _before(self, provider: Any) -> None:
        """Ours first, so that OpenInference's wrapper (and its span) is around ours."""
        import litellm

        from agl_stream.config import Settings

        ask = Settings.from_env().request_token_ids
        for name in WRAPPED:
            _ORIGINALS[name] = getattr(litellm, name)
            setattr(litellm, name, _wrap(_ORIGINALS[name], name == "acompletion", ask))

    def _retract(self) -> None:
        import litellm

        for name, original in _ORIGINALS.items():  # OpenInference's uninstrument put our wrappers back
            setattr(litellm, name, original)
        _ORIGINALS.clear()
