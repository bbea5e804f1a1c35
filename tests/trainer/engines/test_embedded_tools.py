"""Tool calling through the embedded server (tiny random Llama, SmolLM2 tokenizer) and the openai client.

The random model never writes a ``<tool_call>`` by itself, so the tests that need one script the
decode step: ``generation._sample`` is replaced by one that emits a given text's tokens. The model
still runs its forward passes and the server path (prompt, ids, logprobs, SSE) is the real one.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Callable, Iterator, Optional

import httpx
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageToolCall

from agl_stream_trainer.engines import generation
from agl_stream_trainer.engines.embedded import EmbeddedServer
from agl_stream_trainer.engines.generation import Generator
from agl_stream_trainer.engines.tool_calls import plan_chat

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
QUESTION = {"role": "user", "content": "Weather in Paris?"}
HISTORY = [
    QUESTION,
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "sky": "clear"}'},
]

#: a minimal template that renders ``tools`` and tool turns itself (its own format, for the test)
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %} {{ t.function.name }}{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}"
    "{% endfor %}{% endif %}{% if m.role == 'tool' %} (for {{ m.name }}){% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _serve(tokenizer_and_model: tuple[Any, Any]) -> tuple[EmbeddedServer, Generator]:
    model, tokenizer = tokenizer_and_model
    generator = Generator(model, tokenizer, max_batch_rows=4)
    return EmbeddedServer(generator, "tiny").start(), generator


@pytest.fixture
def served(tiny) -> Iterator[tuple[EmbeddedServer, Any]]:
    server, generator = _serve(tiny)
    yield server, generator.tokenizer
    server.stop()
    generator.close()


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch, tiny) -> Callable[[str], list[int]]:
    """``script(text)``: the next request generates ``text`` then ``<|im_end|>``; returns those ids."""
    _model, tokenizer = tiny
    queue: deque[int] = deque()

    def scripted_sample(logits: Any, temperature: float, top_p: float, gen: Optional[Any]) -> int:
        return queue.popleft() if queue else int(tokenizer.eos_token_id)

    monkeypatch.setattr(generation, "_sample", scripted_sample)

    def set_script(text: str) -> list[int]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        queue.extend(ids)
        return ids + [int(tokenizer.eos_token_id)]

    return set_script


def _client(server: EmbeddedServer) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0)


def test_tiny_model_with_tools_and_a_tool_result_turn(served) -> None:
    """No scripting: the real model answers a request that offers tools and carries a tool result."""
    server, tokenizer = served
    reply = _client(server).chat.completions.create(model="tiny", messages=HISTORY, tools=[WEATHER], max_tokens=8,
                                                    temperature=0, extra_body={"return_token_ids": True})
    raw = reply.model_dump()
    plan = plan_chat(HISTORY, tools=[WEATHER], template_renders_tools=False)  # SmolLM2's template ignores tools
    assert tokenizer.decode(raw["prompt_token_ids"]) == tokenizer.apply_chat_template(
        plan.messages, add_generation_prompt=True, tokenize=False)
    prompt = tokenizer.decode(raw["prompt_token_ids"])
    assert json.dumps(WEATHER) in prompt and "<tool_call>\n{\"name\": \"get_weather\"" in prompt
    result = '{"name": "get_weather", "content": {"temp_c": 21, "sky": "clear"}}'
    assert f"<tool_response>\n{result}\n</tool_response>" in prompt
    choice = raw["choices"][0]
    assert 0 < len(choice["token_ids"]) <= 8
    if not choice["message"]["tool_calls"]:  # a random model writes no call: the text comes back as content
        assert choice["message"]["content"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)


def test_scripted_call_parses_into_openai_tool_calls_and_the_next_turn_renders_it(served, script) -> None:
    server, tokenizer = served
    client = _client(server)
    want_ids = script(CALL)
    reply = client.chat.completions.create(model="tiny", messages=[QUESTION], tools=[WEATHER], max_tokens=64,
                                           logprobs=True, extra_body={"return_token_ids": True})
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageToolCall)
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    raw = reply.model_dump()
    assert raw["choices"][0]["token_ids"] == want_ids  # the raw generated tokens, tool call text and eos included
    assert len(raw["choices"][0]["logprobs"]["content"]) == len(want_ids)

    # the agent runs the tool and sends the assistant message back as the client gave it
    history = [QUESTION, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    script("It is sunny.")
    final = client.chat.completions.create(model="tiny", messages=history, tools=[WEATHER], max_tokens=16)
    assert final.choices[0].message.content == "It is sunny." and final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls
    prompt = tokenizer.decode(final.model_dump()["prompt_token_ids"])
    assert "<|im_start|>assistant\n" + CALL + "<|im_end|>" in prompt  # the call rendered as the model wrote it
    assert '<|im_start|>user\n<tool_response>\n{"name": "get_weather", "content": "sunny"}\n</tool_response>' in prompt


def test_streamed_call_arrives_as_tool_call_deltas(served, script) -> None:
    server, _tokenizer = served
    want_ids = script("Checking.\n" + CALL)
    with _client(server).chat.completions.stream(model="tiny", messages=[QUESTION], tools=[WEATHER],
                                                 max_tokens=64) as stream:
        chunks = list(stream)
        final = stream.get_final_completion()
    raw = [c for event in chunks if event.type == "chunk" for c in event.chunk.model_dump()["choices"]]
    assert [i for c in raw for i in c.get("token_ids") or []] == want_ids
    # ids only travel with a non-empty delta: litellm (the ingest proxy) drops chunks whose delta is empty
    assert all(c["delta"].get("content") or c["delta"].get("tool_calls") for c in raw if c.get("token_ids"))
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}


def test_named_tool_choice_prefills_the_call(served, script) -> None:
    server, tokenizer = served
    script('{"city": "Oslo"}}\n</tool_call>')
    reply = _client(server).chat.completions.create(
        model="tiny", messages=[QUESTION], tools=[WEATHER], max_tokens=32,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False)
    [call] = reply.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    prompt = tokenizer.decode(reply.model_dump()["prompt_token_ids"])
    assert prompt.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": ')
    assert 'You must call the function "get_weather"' in prompt and "Call at most one function per reply." in prompt


@pytest.mark.parametrize("extra, why", [
    ({"tool_choice": "none"}, "tool_choice none"),
    ({}, "unknown function"),
])
def test_blocks_that_are_not_calls_stay_content(served, script, extra: dict, why: str) -> None:
    server, _tokenizer = served
    text = CALL if why == "tool_choice none" else CALL.replace("get_weather", "launch_rockets")
    script(text)
    reply = _client(server).chat.completions.create(model="tiny", messages=[QUESTION], tools=[WEATHER],
                                                    max_tokens=64, **extra)
    assert reply.choices[0].message.content == text and not reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "stop"


def test_template_that_renders_tools_gets_them(tiny) -> None:
    model, tokenizer = tiny
    tokenizer.chat_template = TOOLS_TEMPLATE
    server, generator = _serve((model, tokenizer))
    try:
        doc = httpx.post(server.base_url + "/v1/chat/completions", timeout=60, json={
            "messages": HISTORY, "tools": [WEATHER], "max_tokens": 2, "temperature": 0}).json()
    finally:
        server.stop()
        generator.close()
    assert tokenizer.decode(doc["prompt_token_ids"]) == (
        "<|im_start|>system\nTOOLS: get_weather<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\nCALL get_weather {"city": "Paris"}<|im_end|>\n'
        '<|im_start|>tool\n{"temp_c": 21, "sky": "clear"} (for get_weather)<|im_end|>\n<|im_start|>assistant\n')


@pytest.mark.parametrize("body, message", [
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "only function tools"),
    ({"functions": [{"name": "f"}]}, "legacy functions API"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among the tools"),
    ({"messages": [QUESTION, {"role": "tool", "tool_call_id": "call_x", "content": "1"}]}, "answers no earlier"),
])
def test_refusals_are_400(served, body: dict, message: str) -> None:
    server, _tokenizer = served
    resp = httpx.post(server.base_url + "/v1/chat/completions", timeout=30,
                      json={"messages": [QUESTION], "max_tokens": 2, **body})
    assert resp.status_code == 400 and message in resp.json()["detail"]
