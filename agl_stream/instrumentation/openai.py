"""Ask OpenAI-compatible servers for the token ids training needs (vLLM's ``return_token_ids``).

Tracing the OpenAI client is OpenInference's job (``openinference-instrumentation-openai``, see
:mod:`agl_stream.instrumentation`): it records each call, streamed or not, with the full response
the server sent, token ids included. What no tracing library does is *ask* for them: this patch adds
``return_token_ids`` (and ``logprobs``, for importance sampling) to every chat completion request,
which vLLM and ``agl-stream serve`` understand. It wraps ``create`` (which ``stream`` and the
raw-response wrappers call too) and ``parse``, the structured-output call (CrewAI's ``output_pydantic``,
say), which posts its request without ``create``; sync and async. Turn it off with
``AGL_REQUEST_TOKEN_IDS=0`` for providers that reject unknown request fields.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

_ORIGINALS: dict[str, Callable[..., Any]] = {}


def _prepare(kwargs: dict[str, Any]) -> dict[str, Any]:
    extra_body = dict(kwargs.get("extra_body") or {})
    extra_body.setdefault("return_token_ids", True)
    kwargs = {**kwargs, "extra_body": extra_body}
    kwargs.setdefault("logprobs", True)
    return kwargs


def _asking(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **_prepare(kwargs))

    return method


def _asking_async(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await original(self, *args, **_prepare(kwargs))

    return method


def _patched() -> list[tuple[type, str, Callable[..., Callable[..., Any]]]]:
    """(class, method, wrapper) for each patched method: ``create`` and ``parse``, sync and async."""
    from openai.resources.chat.completions import AsyncCompletions, Completions

    return [(Completions, "create", _asking), (AsyncCompletions, "create", _asking_async),
            (Completions, "parse", _asking), (AsyncCompletions, "parse", _asking_async)]  # fmt: skip


def request_token_ids() -> None:
    """Patch chat completions (sync and async, streamed or not, parsed or not) to ask for token ids; calling it
    twice is harmless."""
    if _ORIGINALS:
        return
    for cls, name, wrap in _patched():
        original = getattr(cls, name)
        _ORIGINALS[f"{cls.__name__}.{name}"] = original
        setattr(cls, name, wrap(original))


def stop_requesting_token_ids() -> None:
    for cls, name, _ in _patched():
        original = _ORIGINALS.pop(f"{cls.__name__}.{name}", None)
        if original is not None:
            setattr(cls, name, original)
