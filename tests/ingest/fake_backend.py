"""A deterministic stand-in for a vLLM-style OpenAI server, for proxy tests that need exact control.

It speaks the response contract of vLLM with ``return_token_ids`` (and of the embedded CPU server):
top-level ``prompt_token_ids``, per-choice ``token_ids``, ``logprobs`` when asked, SSE streams. Its
"tokenizer" is one token per byte (utf-8) so tests can decode ids without a model. It records the
requests it received (headers included) so tests can check what the proxy forwarded.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

REPLY = "Hello from the fake backend."
POLICY_VERSION = 7
#: a chat call whose last message says this is answered only once ``app.state.release_held`` is set
HOLD = "Hold until released."
#: a model whose streams break off after two chunks (the connection closes without the stream's end)
BREAKS_MIDWAY = "breaks-midway"


def tokenize(text: str) -> list[int]:
    return list(text.encode())


def detokenize(ids: list[int]) -> str:
    return bytes(ids).decode()


def render_chat(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages) + "<assistant>"


def calculator_reply(last: str) -> str:
    """``CALC a * b`` for "What is a * b?", the value for "RESULT v"."""
    if last.startswith("RESULT "):
        return last.removeprefix("RESULT ").strip()
    return "CALC " + last.removeprefix("What is ").rstrip("?").strip()


def create_fake_backend() -> FastAPI:
    app = FastAPI()
    app.state.requests = []
    app.state.release_held = threading.Event()  # a test sets it to let held calls (see HOLD) answer

    def logprobs_for(ids: list[int], chat: bool) -> Any:
        if chat:
            return {"content": [{"token": chr(i), "logprob": -0.1 * (k + 1), "bytes": [i], "top_logprobs": []}
                                for k, i in enumerate(ids)]}
        return {"tokens": [chr(i) for i in ids], "token_logprobs": [-0.1 * (k + 1) for k in range(len(ids))],
                "top_logprobs": None, "text_offset": list(range(len(ids)))}

    async def handle(request: Request, chat: bool) -> Any:
        body = await request.json()
        app.state.requests.append({"headers": dict(request.headers), "body": body, "path": request.url.path})
        if body.get("model") == "broken":
            return JSONResponse({"error": {"message": "backend exploded", "type": "server_error"}}, status_code=500)
        prompt = render_chat(body["messages"]) if chat else body["prompt"]
        reply = REPLY[: body.get("max_tokens") or len(REPLY)]
        if chat and body.get("model") == "calculator":  # a perfect player of the calculator protocol (examples/calc_agent)
            reply = calculator_reply(str(body["messages"][-1].get("content") or ""))
        prompt_ids, reply_ids = tokenize(prompt), tokenize(reply)
        want_ids = bool(body.get("return_token_ids"))
        want_logprobs = bool(body.get("logprobs"))
        created = int(time.time())
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(reply_ids),
                 "total_tokens": len(prompt_ids) + len(reply_ids)}
        if chat and body["messages"][-1].get("content") == HOLD:  # lets tests act while a call is in flight
            deadline = time.monotonic() + 120
            while not app.state.release_held.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if body.get("stream"):
            return StreamingResponse(stream(body, chat, reply, prompt_ids, reply_ids, want_ids, want_logprobs, usage),
                                     media_type="text/event-stream", headers={"x-policy-version": str(POLICY_VERSION)})
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if body.get("max_tokens") else "stop"}
        if chat:
            choice["message"] = {"role": "assistant", "content": reply}
        else:
            choice["text"] = reply
        if want_ids:
            choice["token_ids"] = reply_ids
        choice["logprobs"] = logprobs_for(reply_ids, chat) if want_logprobs else None
        answer: dict[str, Any] = {
            "id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": body["model"], "choices": [choice], "usage": usage,
        }
        if want_ids:
            answer["prompt_token_ids"] = prompt_ids
        answer["policy_version"] = POLICY_VERSION
        return JSONResponse(answer, headers={"x-policy-version": str(POLICY_VERSION)})

    async def stream(body: dict[str, Any], chat: bool, reply: str, prompt_ids: list[int], reply_ids: list[int],
                     want_ids: bool, want_logprobs: bool, usage: dict[str, int]) -> AsyncIterator[bytes]:
        base = {"id": "cmpl-fake", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": body["model"]}
        pieces = [reply[i:i + 4] for i in range(0, len(reply), 4)]
        for n, piece in enumerate(pieces):
            ids = tokenize(piece)
            choice: dict[str, Any] = {"index": 0, "finish_reason": None}
            if chat:
                choice["delta"] = {"role": "assistant", "content": piece} if n == 0 else {"content": piece}
            else:
                choice["text"] = piece
            if want_ids:
                choice["token_ids"] = ids
            if want_logprobs:
                choice["logprobs"] = logprobs_for(ids, chat)
            chunk: dict[str, Any] = {**base, "choices": [choice]}
            if want_ids and n == 0:
                chunk["prompt_token_ids"] = prompt_ids
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            if body["model"] == BREAKS_MIDWAY and n == 1:
                raise ConnectionAbortedError("the fake backend drops the stream")  # the connection closes unfinished
            if body.get("user") == "slow":  # lets tests act in the middle of a stream
                await asyncio.sleep(0.3)
        last: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        last.update({"delta": {}} if chat else {"text": ""})
        yield f"data: {json.dumps({**base, 'choices': [last]})}\n\n".encode()
        if (body.get("stream_options") or {}).get("include_usage"):
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await handle(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await handle(request, chat=False)

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    return app
