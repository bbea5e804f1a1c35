"""Ask OpenAI-compatible servers for the token ids training needs (vLLM's ``return_token_ids``).

Tracing the OpenAI client is OpenInference's job (``openinference-instrumentation-openai``, see
:mod:`agl_stream.instrumentation`): it records each call, streamed or not, with the full response
the server sent, token ids included. What no tracing library does is *ask* for them: this patch adds
``return_token_ids`` (and ``logprobs``, for importance sampling) to every chat completion request,
which vLLM and ``agl-stream serve`` understand. Turn it off with ``AGL_REQUEST_TOKEN_IDS=0`` for
providers that reject unknown request fields.
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


def request_token_ids() -> None:
    """Patch chat completions (sync and async, streamed or not) to ask for token ids; calling it twice is harmless."""
    from openai.resources.chat.completions import AsyncCompletions, Completions

    if "sync" in _ORIGINALS:
        return
    sync_create, async_create = Completions.create, AsyncCompletions.create
    _ORIGINALS.update(sync=sync_create, async_=async_create)

    @functools.wraps(sync_create)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        return sync_create(self, *args, **_prepare(kwargs))

    @functools.wraps(async_create)
    async def acreate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await async_create(self, *args, **_prepare(kwargs))

    Completions.create = create  # type: ignore[method-assign]
    AsyncCompletions.create = acreate  # type: ignore[method-assign]


def stop_requesting_token_ids() -> None:
    from openai.resources.chat.completions import AsyncCompletions, Completions

    if "sync" in _ORIGINALS:
        Completions.create = _ORIGINALS.pop("sync")  # type: ignore[method-assign]
        AsyncCompletions.create = _ORIGINALS.pop("async_")  # type: ignore[method-assign]
