"""Small OpenAI-compatible chat servers with scripted answers, served by uvicorn in a thread."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from typing import Any, Callable, Union

import uvicorn
from fastapi import FastAPI


def completion(model: str, content: Union[str, dict[str, Any]]) -> dict[str, Any]:
    """A chat completion whose message is ``content`` (text) or the given message dict (e.g. tool calls)."""
    message = content if isinstance(content, dict) else {"role": "assistant", "content": content}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class ScriptedServer:
    """``answer(request_json)`` decides every reply (text, or a message dict); ``requests`` records what came in."""

    def __init__(self, answer: Callable[[dict[str, Any]], Union[str, dict[str, Any]]]) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        @app.post("/chat/completions")
        async def chat(body: dict[str, Any]) -> dict[str, Any]:
            self.requests.append(body)
            return completion(str(body.get("model", "scripted")), self.answer(body))

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name=f"scripted-llm-{self.port}", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "ScriptedServer":
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("scripted LLM server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def last_user_message(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content or "")
    return ""
