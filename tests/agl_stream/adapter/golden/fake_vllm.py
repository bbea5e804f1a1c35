"""A tiny OpenAI-compatible chat server that answers the way vLLM does with ``return_token_ids``.

Used by the golden-corpus recorder (it runs in the side venv, so this module is standard library
only). Every completion gets fresh, unique token ids so each LLM call of the corpus can be told
apart: ``prompt_token_ids`` on the response, ``token_ids`` on each choice (and on each streamed
chunk), optional ``logprobs``, tool calls when the request offers tools, and a fixed response id
for model ``dup`` (two calls reporting one response id).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

DUPLICATE_ID_MODEL = "dup"
DUPLICATE_RESPONSE_ID = "chatcmpl-duplicate"


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0

    def next_call(self) -> int:
        with self.lock:
            self.calls += 1
            return self.calls


def _completion_ids(call: int) -> tuple[list[int], list[int]]:
    """Prompt and response ids unique to this call (the call number is in every id)."""
    base = 1000 * call
    return [base + 1, base + 2, base + 3], [base + 501, base + 502]


def _tool_call(request: dict[str, Any], call: int) -> Optional[dict[str, Any]]:
    """A call of the first offered tool, unless the conversation already holds a tool result."""
    tools = request.get("tools") or []
    messages = request.get("messages") or []
    if not tools or (messages and messages[-1].get("role") == "tool"):
        return None
    name = tools[0]["function"]["name"]
    return {"id": f"call_{call}", "type": "function", "function": {"name": name, "arguments": json.dumps({"x": call})}}


def _logprobs(ids: list[int]) -> dict[str, Any]:
    return {
        "content": [
            {"token": f"t{i}", "logprob": -0.125 * (k + 1), "bytes": [116], "top_logprobs": []}
            for k, i in enumerate(ids)
        ]
    }


class _Handler(BaseHTTPRequestHandler):
    state: _State

    def log_message(self, *args: Any) -> None:  # keep the recorder's output readable
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        call = self.state.next_call()
        prompt_ids, response_ids = _completion_ids(call)
        model = request.get("model", "m")
        response_id = DUPLICATE_RESPONSE_ID if model.endswith(DUPLICATE_ID_MODEL) else f"chatcmpl-{call}"
        tool_call = _tool_call(request, call)
        content = None if tool_call else f"answer {call}"
        if request.get("stream"):
            self._stream(request, response_id, model, prompt_ids, response_ids, content or "")
            return
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_call:
            message["tool_calls"] = [tool_call]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if tool_call else "stop",
            "token_ids": response_ids,
            "logprobs": _logprobs(response_ids) if request.get("logprobs") else None,
        }
        body = {
            "id": response_id,
            "object": "chat.completion",
            "created": 1_700_000_000 + call,
            "model": model,
            "prompt_token_ids": prompt_ids,
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(response_ids),
                      "total_tokens": len(prompt_ids) + len(response_ids)},
        }  # fmt: skip
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self, request: dict[str, Any], response_id: str, model: str, prompt_ids: list[int], response_ids: list[int], text: str
    ) -> None:
        """Server-sent events as vLLM streams them: prompt ids in the first chunk, token ids per chunk."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        half = max(1, len(text) // 2)
        pieces = [(text[:half], response_ids[:1], None), (text[half:], response_ids[1:], "stop")]
        for k, (piece, ids, finish) in enumerate(pieces):
            delta: dict[str, Any] = {"content": piece}
            if k == 0:
                delta["role"] = "assistant"
            chunk: dict[str, Any] = {
                "id": response_id,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "token_ids": ids, "finish_reason": finish}],
            }
            if k == 0:
                chunk["prompt_token_ids"] = prompt_ids
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


class FakeVllm:
    """``with FakeVllm() as server: server.base_url`` -> ``http://127.0.0.1:PORT/v1``."""

    def __init__(self) -> None:
        handler = type("Handler", (_Handler,), {"state": _State()})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-vllm", daemon=True)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "FakeVllm":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
