"""The embedded engine: an OpenAI-compatible server on CPU running a transformers model.

Endpoints (vLLM-compatible where it matters to agl-stream):

- ``POST /v1/chat/completions`` and ``POST /v1/completions`` (``stream: true`` gives SSE chunks).
  Responses carry vLLM's ``return_token_ids`` fields: top-level ``prompt_token_ids`` and
  per-choice ``token_ids`` (always), ``logprobs`` when asked, plus ``policy_version`` (field and
  ``x-agl-policy-version`` header): the weights version that produced the completion.
  Chat takes OpenAI ``tools`` / ``tool_choice`` and tool turns in the history, and answers with
  ``tool_calls`` parsed from hermes ``<tool_call>`` blocks, as vLLM's
  ``--enable-auto-tool-choice --tool-call-parser hermes`` does (see
  :mod:`agl_stream_trainer.engines.tool_calls`). The token ids stay the raw generated ones; a
  streamed answer with tools is held back and each choice comes as one chunk (content,
  ``tool_calls``, all its token ids and logprobs) followed by its finish chunk.
- ``GET /v1/models``, ``GET /health``.
- ``POST /agl/v1/weights`` ``{"path": ".../model.safetensors", "version": N}`` swaps weights in
  process; ``GET /agl/v1/weights`` reports the served version.

Concurrent requests are batched by :class:`agl_stream_trainer.engines.generation.Generator`; weight swaps
happen between batches so no request is dropped.

:class:`EmbeddedEngine` is the :class:`~agl_stream_trainer.engines.base.InferenceEngine`: co-located with the
learner it swaps the state dict in process (no file), otherwise it writes a safetensors file
and posts its path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Optional, Union

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from agl_stream.service import add_health_routes

from agl_stream_trainer.engines.base import Weights
from agl_stream_trainer.engines.generation import Choice, Generator, GenRequest, GenResult
from agl_stream_trainer.engines.tool_calls import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ChatPlan,
    ToolRequestError,
    parse_tool_calls,
    plan_chat,
)

logger = logging.getLogger(__name__)

VERSION_HEADER = "x-agl-policy-version"


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown OpenAI/vLLM options are accepted and ignored
    model: Optional[str] = None
    max_tokens: Optional[int] = Field(default=None, ge=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=16)
    seed: Optional[int] = None
    stream: bool = False
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None


class CompletionRequest(_Common):
    prompt: Union[str, list[int]]
    logprobs: Optional[int] = Field(default=None, ge=0)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Optional[Union[str, list[dict[str, Any]]]] = None
    tool_calls: Optional[list[dict[str, Any]]] = None  # assistant turns
    tool_call_id: Optional[str] = None  # tool turns


class ChatRequest(_Common):
    messages: list[ChatMessage]
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(default=None, ge=0)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None


class WeightsRequest(BaseModel):
    path: str
    version: int = Field(ge=0)


#: a tool whose name shows in the rendered probe only if the chat template renders ``tools``
_PROBE_TOOL = {"type": "function", "function": {"name": "agl_probe_tool_5e1f", "description": "probe",
                                                "parameters": {"type": "object", "properties": {}}}}


def create_app(generator: Generator, model_name: str, default_max_tokens: int = 128) -> FastAPI:
    app = FastAPI(title="agl-stream embedded inference server")
    tokenizer = generator.tokenizer

    def _gen_request(req: _Common, prompt_ids: list[int]) -> GenRequest:
        if req.stop:
            raise HTTPException(400, "stop strings are not supported by the embedded engine; use stop_token_ids")
        return GenRequest(
            prompt_ids=prompt_ids,
            max_tokens=req.max_completion_tokens or req.max_tokens or default_max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            n=req.n,
            seed=req.seed,
            stop_token_ids=tuple(req.stop_token_ids or ()),
        )

    def _decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    # special tokens dropped before parsing tool calls, except the tags themselves (special in
    # some vocabularies, where skip_special_tokens would erase them)
    tag_ids = {tokenizer.get_vocab().get(t) for t in (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)}
    drop_ids = frozenset(int(t) for t in tokenizer.all_special_ids) - tag_ids
    template_renders_tools: list[bool] = []  # filled on the first chat request

    def _tool_text(plan: ChatPlan, ids: list[int]) -> str:
        """The text tool calls are parsed from: the pre-fill plus the generated tokens."""
        return plan.prefill + tokenizer.decode([t for t in ids if t not in drop_ids], skip_special_tokens=False)

    async def _run(gen_req: GenRequest) -> GenResult:
        try:
            return await asyncio.wrap_future(generator.submit(gen_req))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None

    def _headers(version: int) -> dict[str, str]:
        return {VERSION_HEADER: str(version)}

    def _usage(result: GenResult) -> dict[str, int]:
        completion = sum(len(c.token_ids) for c in result.choices)
        return {"prompt_tokens": len(result.prompt_ids), "completion_tokens": completion,
                "total_tokens": len(result.prompt_ids) + completion}

    # ------------------------------------------------------------ completions

    def _completion_logprobs(choice: Choice) -> dict[str, Any]:
        tokens = [tokenizer.decode([t]) for t in choice.token_ids]
        offsets, pos = [], 0
        for tok in tokens:
            offsets.append(pos)
            pos += len(tok)
        return {"tokens": tokens, "token_logprobs": choice.logprobs, "top_logprobs": None, "text_offset": offsets}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        prompt_ids = list(body.prompt) if isinstance(body.prompt, list) else tokenizer.encode(body.prompt, add_special_tokens=False)
        gen_req = _gen_request(body, prompt_ids)
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            return _stream(gen_req, rid, created, chat=False, want_logprobs=body.logprobs is not None)
        result = await _run(gen_req)
        choices = [
            {
                "index": i,
                "text": _decode(c.token_ids),
                "logprobs": _completion_logprobs(c) if body.logprobs is not None else None,
                "finish_reason": c.finish_reason,
                "token_ids": c.token_ids,
            }
            for i, c in enumerate(result.choices)
        ]
        doc = {"id": rid, "object": "text_completion", "created": created, "model": model_name, "choices": choices,
               "usage": _usage(result), "prompt_token_ids": result.prompt_ids, "policy_version": result.policy_version}
        return JSONResponse(doc, headers=_headers(result.policy_version))

    # ------------------------------------------------------------ chat completions

    def _chat_logprobs(choice: Choice) -> dict[str, Any]:
        content = []
        for token_id, lp in zip(choice.token_ids, choice.logprobs):
            text = tokenizer.decode([token_id])
            content.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []})
        return {"content": content}

    def _renders_tools() -> bool:
        """Whether the chat template renders ``tools=`` (probed once: SmolLM2's does not)."""
        if not template_renders_tools:
            probe = [{"role": "user", "content": "hi"}]
            text = tokenizer.apply_chat_template(probe, tools=[_PROBE_TOOL], add_generation_prompt=True, tokenize=False)
            template_renders_tools.append(_PROBE_TOOL["function"]["name"] in text)
        return template_renders_tools[0]

    def _chat_prompt(body: ChatRequest) -> tuple[list[int], ChatPlan]:
        import jinja2

        legacy = sorted({"functions", "function_call"} & set(body.model_extra or {}))
        if legacy:
            raise HTTPException(400, f"{', '.join(legacy)} (the legacy functions API) not supported; "
                                     "use tools and tool_choice")
        # plain chats never probe the template: they render exactly as before tools were supported
        uses_tools = bool(body.tools) or any(m.tool_calls or m.role == "tool" for m in body.messages)
        try:
            plan = plan_chat([m.model_dump(exclude_none=True) for m in body.messages], tools=body.tools,
                             tool_choice=body.tool_choice, parallel_tool_calls=body.parallel_tool_calls,
                             template_renders_tools=uses_tools and _renders_tools())
            ids = tokenizer.apply_chat_template(plan.messages, tools=plan.template_tools, add_generation_prompt=True,
                                                tokenize=True)
        except ToolRequestError as exc:
            raise HTTPException(400, str(exc)) from None
        except jinja2.TemplateError as exc:  # the template's own raise_exception(...) on messages it cannot render
            raise HTTPException(400, f"the chat template cannot render these messages: {exc}") from None
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        prompt = [int(t) for t in ids]
        if plan.prefill:
            prompt += tokenizer.encode(plan.prefill, add_special_tokens=False)
        return prompt, plan

    def _chat_message(plan: ChatPlan, choice: Choice) -> tuple[dict[str, Any], str]:
        """(message, finish_reason) of a choice; tool calls are parsed only when tools are in play."""
        if not plan.parse_names:
            return {"role": "assistant", "content": _decode(choice.token_ids)}, choice.finish_reason
        parsed = parse_tool_calls(_tool_text(plan, choice.token_ids), plan.parse_names, first_only=plan.first_call_only)
        if not parsed.tool_calls:
            return {"role": "assistant", "content": parsed.content}, choice.finish_reason
        return {"role": "assistant", "content": parsed.content, "tool_calls": parsed.tool_calls}, "tool_calls"

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest) -> Any:
        prompt_ids, plan = _chat_prompt(body)
        gen_req = _gen_request(body, prompt_ids)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            return _stream(gen_req, rid, created, chat=True, want_logprobs=body.logprobs, plan=plan)
        result = await _run(gen_req)
        choices = []
        for i, c in enumerate(result.choices):
            message, finish_reason = _chat_message(plan, c)
            choices.append({
                "index": i,
                "message": message,
                "logprobs": _chat_logprobs(c) if body.logprobs else None,
                "finish_reason": finish_reason,
                "token_ids": c.token_ids,
            })
        doc = {"id": rid, "object": "chat.completion", "created": created, "model": model_name, "choices": choices,
               "usage": _usage(result), "prompt_token_ids": result.prompt_ids, "policy_version": result.policy_version}
        return JSONResponse(doc, headers=_headers(result.policy_version))

    # ------------------------------------------------------------ streaming (SSE)

    def _whole_delta(message: dict[str, Any]) -> dict[str, Any]:
        """A held-back chat choice as one delta (tool calls numbered by ``index``, as OpenAI streams them)."""
        delta: dict[str, Any] = {"role": "assistant"}
        if message["content"] is not None:
            delta["content"] = message["content"]
        if "tool_calls" in message:
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
        return delta

    def _stream(gen_req: GenRequest, rid: str, created: int, *, chat: bool, want_logprobs: bool,
                plan: Optional[ChatPlan] = None) -> StreamingResponse:
        # With tools offered, whether the text is a call is known only at the end: each choice then
        # comes whole in one chunk (content, tool_calls, all its token ids) before its finish chunk.
        # Per-token chunks with an empty delta would not do: litellm (the ingest proxy) drops them,
        # and their token ids with them.
        held = plan if plan is not None and plan.parse_names else None
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, int, float]] = asyncio.Queue()
        if held is None:
            gen_req.on_token = lambda i, tok, lp: loop.call_soon_threadsafe(events.put_nowait, (i, tok, lp))
        future = generator.submit(gen_req)
        version_at_submit = generator.policy_version
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choice: dict[str, Any], **extra: Any) -> str:
            doc = {"id": rid, "object": obj, "created": created, "model": model_name, "choices": [choice], **extra}
            return f"data: {json.dumps(doc)}\n\n"

        async def body() -> AsyncIterator[str]:
            ids: list[list[int]] = [[] for _ in range(gen_req.n)]
            texts = ["" for _ in range(gen_req.n)]
            first = True
            wrapped = asyncio.wrap_future(future)
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({getter, wrapped}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if events.empty():
                        break
                    continue
                index, token, lp = getter.result()
                ids[index].append(token)
                text = _decode(ids[index])
                delta, texts[index] = text[len(texts[index]):], text
                if chat:
                    choice: dict[str, Any] = {"index": index, "delta": {"content": delta, **({"role": "assistant"} if first else {})},
                                              "finish_reason": None, "token_ids": [token]}
                    if want_logprobs:
                        choice["logprobs"] = {"content": [{"token": tokenizer.decode([token]), "logprob": lp, "top_logprobs": []}]}
                else:
                    choice = {"index": index, "text": delta, "finish_reason": None, "token_ids": [token],
                              "logprobs": {"tokens": [tokenizer.decode([token])], "token_logprobs": [lp]} if want_logprobs else None}
                extra = {"prompt_token_ids": gen_req.prompt_ids} if first else {}
                first = False
                yield chunk(choice, **extra)
            result = await wrapped
            for i, c in enumerate(result.choices):
                final = {"index": i, "finish_reason": c.finish_reason, "token_ids": []}
                final.update({"delta": {}} if chat else {"text": ""})
                if held is not None:
                    message, final["finish_reason"] = _chat_message(held, c)
                    whole: dict[str, Any] = {"index": i, "delta": _whole_delta(message), "finish_reason": None,
                                             "token_ids": c.token_ids}
                    if want_logprobs:
                        whole["logprobs"] = _chat_logprobs(c)
                    yield chunk(whole, **({"prompt_token_ids": gen_req.prompt_ids} if first else {}))
                    first = False
                yield chunk(final, usage=_usage(result), policy_version=result.policy_version)
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream", headers=_headers(version_at_submit))

    # ------------------------------------------------------------ admin

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "agl-stream",
                                            "policy_version": generator.policy_version}]}

    add_health_routes(app, lambda: (True, {"policy_version": generator.policy_version}))

    @app.get("/agl/v1/weights")
    async def get_weights() -> Any:
        return {"version": generator.policy_version}

    @app.post("/agl/v1/weights")
    async def post_weights(body: WeightsRequest) -> Any:
        if not Path(body.path).exists():
            raise HTTPException(404, f"{body.path} does not exist")
        started = time.perf_counter()
        try:
            version = await asyncio.wrap_future(generator.swap(body.path, body.version))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return {"version": version, "seconds": time.perf_counter() - started}

    return app


class EmbeddedServer:
    """Runs :func:`create_app` on a thread of its own (the kit's :class:`HttpHost`; port 0 picks a free port)."""

    def __init__(self, generator: Generator, model_name: str, host: str = "127.0.0.1", port: int = 0) -> None:
        from agl_stream.service import HttpHost

        self.generator = generator
        self.model_name = model_name
        self._host = HttpHost(create_app(generator, model_name), host, port, name="agl-serve")
        self.host, self.port = host, self._host.port

    @property
    def base_url(self) -> str:
        return self._host.url

    def start(self, timeout: float = 30.0) -> "EmbeddedServer":
        self._host.start_in_thread(timeout)
        return self

    def stop(self) -> None:
        self._host.stop_thread()


class EmbeddedEngine:
    """:class:`InferenceEngine` for the embedded server: in-process swap when co-located, else HTTP."""

    def __init__(
        self,
        base_url: str,
        model_name: str,
        *,
        generator: Optional[Generator] = None,
        publish_dir: Optional[Path] = None,
        keep_files: int = 2,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.endpoint = self.base_url + "/v1"
        self.model_name = model_name
        self.generator = generator
        self.publish_dir = publish_dir
        self.keep_files = keep_files

    async def publish(self, version: int, weights: Weights) -> None:
        if self.generator is not None:
            await asyncio.wrap_future(self.generator.swap(weights, version))
            return
        path = Path(weights) if isinstance(weights, (str, Path)) else await asyncio.to_thread(self._write, version, weights)
        import httpx

        async with httpx.AsyncClient(timeout=600) as client:
            resp = await client.post(f"{self.base_url}/agl/v1/weights", json={"path": str(path.resolve()), "version": version})
            resp.raise_for_status()

    def _write(self, version: int, weights: Any) -> Path:
        from safetensors.torch import save_file

        if self.publish_dir is None:
            raise ValueError("a remote embedded engine needs publish_dir to write weights files")
        self.publish_dir.mkdir(parents=True, exist_ok=True)
        path = self.publish_dir / f"policy-v{version:08d}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(dict(weights), str(tmp), metadata={"format": "pt", "policy_version": str(version)})
        tmp.replace(path)
        for old in sorted(self.publish_dir.glob("policy-v*.safetensors"))[: -self.keep_files]:
            old.unlink(missing_ok=True)
        return path

    async def close(self) -> None:
        return None

