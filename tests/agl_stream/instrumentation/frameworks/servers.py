"""Local model servers for the framework tests (no network): a vLLM-like chat engine that can ask for tools,
and an Anthropic Messages-API front that forwards to it.

:class:`ToolVllm` answers ``/v1/chat/completions`` like vLLM with ``return_token_ids`` (prompt ids at the top
level, the response's on the choice; streamed: prompt ids in the first chunk, each delta's ids in its chunk),
and a scripted reply may be a tool call, which the framework agents need to run tools. Ids are
:func:`~tests.agl_stream.scripted_vllm.token_ids` of the text (one per word), and every reply's ids are
kept in :attr:`ToolVllm.returned`, so a test compares triplets with what the server actually sent.

:class:`MessagesFront` serves ``/v1/messages``. Neither ``agl-stream ingest proxy`` (OpenAI routes only) nor
litellm's own proxy (``litellm[proxy]`` is not installed) can serve it here, so this fixture stands in: it
translates with litellm's Anthropic adapter (what ``litellm.anthropic_messages`` uses for other providers),
forwards to the engine through ``litellm.acompletion`` asking for token ids (as the agl proxy does for its
backends) and returns them as extra fields, vLLM's names: ``prompt_token_ids`` and ``token_ids`` on the
message; streamed, ``prompt_token_ids`` on ``message_start``'s message and ``token_ids`` on the
``content_block_delta`` events. It fetches the engine's answer whole and re-emits it as events, as upstream's
proxy does for ``/messages`` streams. :class:`ServersProcess` runs both in a process of their own, as they run
beside an agent: the Anthropic SDK propagates its trace context, and a front in the test's process would
record its own litellm call into the agent's trace.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from tests.agl_stream.scripted_vllm import prompt_text, token_ids


#: litellm fetches these from GitHub when imported unless told to use its bundled copies
LITELLM_OFFLINE = ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


Reply = Union[str, ToolCall]


def reply_text(reply: Reply) -> str:
    """The text whose ids stand for the reply's tokens (a tool call's name and JSON arguments)."""
    return reply if isinstance(reply, str) else f"{reply.name} {json.dumps(reply.arguments)}"


def calculator(body: dict[str, Any]) -> Reply:
    """The scripted model of the framework tests: hands off to ``calculator`` when it can, calls ``multiply`` on
    the question's numbers when it can, and states the product once a tool returned it."""
    last = body["messages"][-1]
    if last.get("role") == "tool" and str(last.get("content") or "").strip().isdigit():
        return f"the product is {str(last['content']).strip()}"
    offered = {str((tool.get("function") or {}).get("name")) for tool in body.get("tools") or []}
    if "transfer_to_calculator" in offered:
        return ToolCall("transfer_to_calculator", {})
    question = next(str(m.get("content")) for m in body["messages"] if m.get("role") == "user")
    numbers = re.search(r"(\d+) times (\d+)", question)
    if "multiply" in offered and numbers:
        return ToolCall("multiply", {"a": int(numbers[1]), "b": int(numbers[2])})
    return "I cannot tell"


@dataclass
class Returned:
    """What the engine sent for one request."""

    request: dict[str, Any]
    prompt_token_ids: list[int]
    response_token_ids: list[int]


class _Served:
    """A FastAPI app on a free loopback port, in a daemon thread."""

    def __init__(self, app: FastAPI, name: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name=f"{name}-{self.port}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("local test server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@dataclass
class ToolVllm:
    """``script(request) -> Reply`` decides every reply; a :class:`ToolCall` reply asks for that tool."""

    script: Callable[[dict[str, Any]], Reply]
    returned: list[Returned] = field(default_factory=list)

    def __post_init__(self) -> None:
        app = FastAPI()
        app.add_api_route("/v1/chat/completions", self._chat, methods=["POST"])
        app.add_api_route("/v1/_returned", self._returned, methods=["GET"])  # for a test in another process
        self._served = _Served(app, "tool-vllm")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._served.port}/v1"

    def __enter__(self) -> "ToolVllm":
        self._served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.stop()

    async def _returned(self) -> list[dict[str, Any]]:
        return [{"request": r.request, "prompt_token_ids": r.prompt_token_ids,
                 "response_token_ids": r.response_token_ids} for r in self.returned]  # fmt: skip

    async def _chat(self, body: dict[str, Any]) -> Any:
        reply = self.script(body)
        with_ids = bool(body.get("return_token_ids") or (body.get("extra_body") or {}).get("return_token_ids"))
        prompt_ids, response_ids = token_ids(prompt_text(body)), token_ids(reply_text(reply))
        self.returned.append(Returned(body, prompt_ids if with_ids else [], response_ids if with_ids else []))
        cid, model = f"chatcmpl-{uuid.uuid4().hex[:12]}", str(body.get("model", "policy"))
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(response_ids),
                 "total_tokens": len(prompt_ids) + len(response_ids)}  # fmt: skip
        if body.get("stream"):
            chunks = _chunks(cid, model, reply, prompt_ids, response_ids, with_ids, usage, body)
            return StreamingResponse(chunks, media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": reply if isinstance(reply, str) else None}
        if not isinstance(reply, str):
            message["tool_calls"] = [_tool_call(cid, reply)]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": _finish(reply)}
        doc: dict[str, Any] = {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                               "choices": [choice], "usage": usage}  # fmt: skip
        if with_ids:
            doc["prompt_token_ids"], choice["token_ids"] = prompt_ids, response_ids
        return doc


def _finish(reply: Reply) -> str:
    return "stop" if isinstance(reply, str) else "tool_calls"


def _tool_call(cid: str, call: ToolCall) -> dict[str, Any]:
    return {"id": f"call_{cid[-8:]}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}  # fmt: skip


def _chunks(cid: str, model: str, reply: Reply, prompt_ids: list[int], response_ids: list[int], with_ids: bool,
            usage: dict[str, int], body: dict[str, Any]) -> Iterator[str]:  # fmt: skip
    def chunk(delta: dict[str, Any], finish: Any = None, ids: Any = None, **extra: Any) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if with_ids and ids is not None:
            choice["token_ids"] = ids
        doc = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
               "choices": [choice], **extra}  # fmt: skip
        return f"data: {json.dumps(doc)}\n\n"

    yield chunk({"role": "assistant", "content": ""}, **({"prompt_token_ids": prompt_ids} if with_ids else {}))
    if isinstance(reply, str):
        for i, word in enumerate(reply.split()):
            yield chunk({"content": word if i == 0 else " " + word}, ids=token_ids(word))
    else:
        call = _tool_call(cid, reply)
        yield chunk({"tool_calls": [{"index": 0, **call}]}, ids=response_ids)
    yield chunk({}, _finish(reply))
    if (body.get("stream_options") or {}).get("include_usage"):
        last = {"id": cid, "object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
        yield f"data: {json.dumps(last)}\n\n"
    yield "data: [DONE]\n\n"


class MessagesFront:
    """``/v1/messages`` in front of an OpenAI-compatible engine (see the module doc); ``engine_url`` ends in ``/v1``."""

    def __init__(self, engine_url: str) -> None:
        self.engine_url = engine_url
        self.requests: list[dict[str, Any]] = []
        app = FastAPI()
        app.add_api_route("/v1/messages", self._messages, methods=["POST"])
        self._served = _Served(app, "messages-front")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._served.port}"  # the Anthropic client adds /v1/messages

    def __enter__(self) -> "MessagesFront":
        self._served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.stop()

    async def _messages(self, body: dict[str, Any]) -> Any:
        import litellm
        from litellm.llms.anthropic.pass_through.adapters.transformation import AnthropicAdapter

        self.requests.append(body)
        adapter = AnthropicAdapter()
        chat = dict(adapter.translate_completion_input_params({k: v for k, v in body.items() if k != "stream"}) or {})
        chat.pop("model", None)
        response = await litellm.acompletion(model=f"hosted_vllm/{body['model']}", api_base=self.engine_url,
                                             api_key="unused", extra_body={"return_token_ids": True},
                                             **chat)  # fmt: skip
        message = dict(adapter.translate_completion_output_params(response) or {})
        message["prompt_token_ids"] = list(getattr(response, "prompt_token_ids", None) or [])
        message["token_ids"] = list((response.choices[0].provider_specific_fields or {}).get("token_ids") or [])
        if body.get("stream"):
            return StreamingResponse(_events(message), media_type="text/event-stream")
        return message


def _events(message: dict[str, Any]) -> Iterator[str]:
    """A whole message as Messages-API stream events, the token ids where the module doc says."""

    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    usage = message.get("usage") or {}
    start = {k: v for k, v in message.items() if k not in ("content", "token_ids", "stop_reason", "usage")}
    opening = {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0}
    yield event("message_start", message={**start, "content": [], "stop_reason": None, "usage": opening})
    ids: list[int] = list(message.get("token_ids") or [])
    for index, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            yield event("content_block_start", index=index, content_block={**block, "input": {}})
            delta: dict[str, Any] = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
        else:
            yield event("content_block_start", index=index, content_block={"type": "text", "text": ""})
            delta = {"type": "text_delta", "text": block.get("text", "")}
        yield event("content_block_delta", index=index, delta=delta, token_ids=ids)
        ids = []  # the whole answer's ids ride on its first delta (the engine's answer came whole)
        yield event("content_block_stop", index=index)
    yield event("message_delta", delta={"stop_reason": message.get("stop_reason"), "stop_sequence": None},
                usage={"output_tokens": usage.get("output_tokens", 0)})  # fmt: skip
    yield event("message_stop")


class ServersProcess:
    """A :class:`ToolVllm` running ``script`` (``"module:function"``) and a :class:`MessagesFront` on it, in a child
    process; :attr:`front_url`, :attr:`engine_url`, :meth:`returned` (what the engine sent, in order)."""

    def __init__(self, script: str) -> None:
        self.script = script
        self.front_url = self.engine_url = ""
        self._process: Any = None

    def __enter__(self) -> "ServersProcess":
        env = {**os.environ, **{name: "True" for name in LITELLM_OFFLINE}}
        root = Path(__file__).resolve().parents[4]  # the repository, where ``tests`` imports from
        self._process = subprocess.Popen([sys.executable, "-m", __name__, self.script], stdout=subprocess.PIPE,
                                         env=env, cwd=root, text=True)  # fmt: skip
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the servers process exited with {self._process.wait()}")
        urls = json.loads(line)
        self.front_url, self.engine_url = urls["front"], urls["engine"]
        return self

    def returned(self) -> list[dict[str, Any]]:
        import httpx

        return list(httpx.get(f"{self.engine_url}/_returned", timeout=10).json())

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()
        self._process.wait(timeout=20)


def _serve(script: str) -> None:
    module, _, name = script.partition(":")
    with ToolVllm(getattr(importlib.import_module(module), name)) as engine, MessagesFront(engine.base_url) as front:
        print(json.dumps({"front": front.base_url, "engine": engine.base_url}), flush=True)
        threading.Event().wait()  # until terminated


if __name__ == "__main__":  # the classes of the importable module, the scripts' own (not this __main__ copy)
    importlib.import_module("tests.agl_stream.instrumentation.frameworks.servers")._serve(sys.argv[1])
