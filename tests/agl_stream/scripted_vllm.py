"""A scripted OpenAI-compatible chat server that answers like vLLM with ``return_token_ids``.

Non-streamed replies carry ``prompt_token_ids`` (top level) and ``choices[0].token_ids``; streamed
replies send ``prompt_token_ids`` in the first chunk and each content delta's ``token_ids`` in its
chunk, as vLLM does. Token ids are a deterministic function of the text (one id per word), so a test
can compute what a triplet must contain. ``answer(request) -> str`` decides every reply.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse


def token_ids(text: str) -> list[int]:
    """One id per word: a stable stand-in for a tokenizer."""
    return [sum(map(ord, word)) % 50_000 for word in text.split()]


def prompt_text(body: dict[str, Any]) -> str:
    return " ".join(str(m.get("content") or "") for m in body.get("messages", []))


class ScriptedVllm:
    def __init__(self, answer: Callable[[dict[str, Any]], str]) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(body: dict[str, Any]) -> Any:
            self.requests.append(body)
            text = self.answer(body)
            model = str(body.get("model", "scripted"))
            with_ids = bool(body.get("return_token_ids"))
            if body.get("stream"):
                return StreamingResponse(self._stream(model, body, text, with_ids), media_type="text/event-stream")
            doc: dict[str, Any] = {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(token_ids(prompt_text(body))), "completion_tokens": len(token_ids(text)),
                          "total_tokens": len(token_ids(prompt_text(body))) + len(token_ids(text))},
            }  # fmt: skip
            if with_ids:
                doc["prompt_token_ids"] = token_ids(prompt_text(body))
                doc["choices"][0]["token_ids"] = token_ids(text)
            return doc

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name=f"scripted-vllm-{self.port}", daemon=True)

    @staticmethod
    def _stream(model: str, body: dict[str, Any], text: str, with_ids: bool) -> Iterator[str]:
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"

        def chunk(delta: dict[str, Any], finish: Any = None, **extra: Any) -> str:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            if "token_ids" in extra:
                choice["token_ids"] = extra.pop("token_ids")
            doc = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                   "choices": [choice], **extra}  # fmt: skip
            return f"data: {json.dumps(doc)}\n\n"

        first: dict[str, Any] = {"prompt_token_ids": token_ids(prompt_text(body))} if with_ids else {}
        yield chunk({"role": "assistant", "content": ""}, **first)
        words = text.split()
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            yield chunk({"content": piece}, **({"token_ids": token_ids(word)} if with_ids else {}))
        yield chunk({}, "stop")
        yield "data: [DONE]\n\n"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "ScriptedVllm":
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("scripted vLLM server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
