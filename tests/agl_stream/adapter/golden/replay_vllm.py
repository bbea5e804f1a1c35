"""A chat-completions server that records a framework's LLM calls, or answers them again from the record.

Standard library only: the same file serves agl-stream's side of the framework golden cases (agl-stream's
venvs) and upstream's (the upstream venv), so both see byte-for-byte the same server answers.

* record mode (``forward_to``): each request is forwarded to the scripted engine
  (:class:`~tests.agl_stream.instrumentation.frameworks.servers.ToolVllm`) and the exchange is kept as
  ``{"request": body, "response": doc}`` or, streamed, ``{"request": body, "stream": [chunk docs]}``.
* replay mode (``exchanges``): the n-th request gets the n-th recorded answer. ``strict`` refuses (HTTP 409) a
  request that differs from the recorded one, so a replay proves the caller made the same calls. A request
  for a plain answer whose record is a stream gets the stream folded into one completion (what the engine's
  plain answer carries: the content, tool calls, prompt ids and the response ids in order): upstream's LLM
  proxy turns streamed calls into plain ones before they reach the engine. ``tolerated`` names request keys a
  caller's instrumentation may add or change (AgentOps asks streams for ``stream_options``); ``is_probe`` tells
  requests that are no call of the agent's (an LLM proxy's health probe), answered and not counted.

``GET /v1/_state`` returns what arrived (``received``), what was recorded (``recorded``), the refused requests
(``refused``) and whatever ``extra_state()`` adds, for a caller in another process.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

Exchange = dict[str, Any]


def fold_stream(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One chat completion holding what a recorded stream sent (vLLM's ``token_ids`` concatenated in order)."""
    if not chunks:
        raise ValueError("an empty stream has no completion")
    first = chunks[0]
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    token_ids: list[int] = []
    prompt_ids: Optional[list[int]] = None
    finish: Optional[str] = None
    usage: Optional[dict[str, Any]] = None
    for chunk in chunks:
        if chunk.get("prompt_token_ids") is not None:
            prompt_ids = list(chunk["prompt_token_ids"])
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                empty = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                merged = calls.setdefault(call.get("index", 0), empty)
                merged["id"] = call.get("id") or merged["id"]
                function = call.get("function") or {}
                merged["function"]["name"] += function.get("name") or ""
                merged["function"]["arguments"] += function.get("arguments") or ""
            token_ids += list(choice.get("token_ids") or [])
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    choice_doc: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    doc: dict[str, Any] = {"id": first["id"], "object": "chat.completion", "created": first.get("created", 0),
                           "model": first.get("model"), "choices": [choice_doc]}  # fmt: skip
    if prompt_ids is not None:
        doc["prompt_token_ids"] = prompt_ids
        choice_doc["token_ids"] = token_ids
    # the engine's plain answers count tokens by their ids (ToolVllm: one id per token)
    doc["usage"] = usage or {"prompt_tokens": len(prompt_ids or []), "completion_tokens": len(token_ids),
                             "total_tokens": len(prompt_ids or []) + len(token_ids)}  # fmt: skip
    return doc


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks) + b"data: [DONE]\n\n"


def _parse_sse(raw: bytes) -> list[dict[str, Any]]:
    chunks = []
    for line in raw.decode().splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            chunks.append(json.loads(line[5:]))
    return chunks


class _Handler(BaseHTTPRequestHandler):
    owner: "ReplayVllm"

    def log_message(self, *args: Any) -> None:  # the callers report what matters
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if not self.path.endswith("/_state"):
            self._send(404, b'{"error": "unknown route"}')
            return
        self._send(200, json.dumps(self.owner.state()).encode())

    def do_POST(self) -> None:  # noqa: N802
        if not self.path.endswith("/chat/completions"):
            self._send(404, b'{"error": "only /chat/completions is served"}')
            return
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        status, payload, content_type = self.owner.answer(body)
        self._send(status, payload, content_type)


class ReplayVllm:
    """``with ReplayVllm(exchanges) as engine: engine.base_url`` (``http://127.0.0.1:PORT/v1``); see the module doc."""

    def __init__(
        self,
        exchanges: Optional[list[Exchange]] = None,
        *,
        forward_to: Optional[str] = None,
        strict: bool = False,
        tolerated: tuple[str, ...] = (),
        is_probe: Optional[Callable[[dict[str, Any]], bool]] = None,
        extra_state: Optional[Callable[[], dict[str, Any]]] = None,
    ) -> None:
        if (exchanges is None) == (forward_to is None):
            raise ValueError("give either recorded exchanges (replay) or forward_to (record)")
        self.exchanges = exchanges
        self.forward_to = forward_to
        self.strict = strict
        self.tolerated = tolerated
        self.is_probe = is_probe
        self.probes = 0
        self.extra_state = extra_state
        self.received: list[dict[str, Any]] = []
        self.recorded: list[Exchange] = []
        self.refused: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"owner": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="replay-vllm", daemon=True)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "ReplayVllm":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def state(self) -> dict[str, Any]:
        with self._lock:
            state = {"received": list(self.received), "recorded": list(self.recorded), "refused": list(self.refused)}
        return {**state, **(self.extra_state() if self.extra_state is not None else {})}

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes, str]:
        """(status, payload, content type) for one request."""
        if self.is_probe is not None and self.is_probe(body):
            with self._lock:
                self.probes += 1
            choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            probe = {"id": "chatcmpl-probe", "object": "chat.completion", "created": 0, "model": body.get("model"),
                     "choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            return 200, json.dumps(probe).encode(), "application/json"
        with self._lock:
            index = len(self.received)
            self.received.append(body)
        if self.forward_to is not None:
            return self._forward(body)
        assert self.exchanges is not None
        if index >= len(self.exchanges):
            return self._refuse(index, body, f"request {index + 1} but only {len(self.exchanges)} were recorded")
        exchange = self.exchanges[index]
        if self.strict and self._without_tolerated(body) != self._without_tolerated(exchange["request"]):
            return self._refuse(index, body, f"request {index + 1} differs from the recorded one")
        if body.get("stream"):
            if "stream" not in exchange:
                why = f"request {index + 1} asks for a stream; the record has a plain answer"
                return self._refuse(index, body, why)
            return 200, _sse(exchange["stream"]), "text/event-stream"
        doc = exchange["response"] if "response" in exchange else fold_stream(exchange["stream"])
        return 200, json.dumps(doc).encode(), "application/json"

    def _without_tolerated(self, request: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in request.items() if k not in self.tolerated}

    def _refuse(self, index: int, body: dict[str, Any], why: str) -> tuple[int, bytes, str]:
        with self._lock:
            self.refused.append({"index": index, "why": why, "request": body})
        return 409, json.dumps({"error": {"message": why, "type": "replay_mismatch"}}).encode(), "application/json"

    def _forward(self, body: dict[str, Any]) -> tuple[int, bytes, str]:
        request = urllib.request.Request(f"{self.forward_to}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"}, method="POST")  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if streamed:
            chunks = _parse_sse(raw)
            with self._lock:
                self.recorded.append({"request": body, "stream": chunks})
            return 200, _sse(chunks), "text/event-stream"
        doc = json.loads(raw)
        with self._lock:
            self.recorded.append({"request": body, "response": doc})
        return 200, json.dumps(doc).encode(), "application/json"
