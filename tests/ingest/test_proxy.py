"""The LLM proxy against a deterministic vLLM-style backend and the real broker.

The fake backend (one token per byte) makes every recorded id checkable by decoding; the test
against the real embedded CPU model lives in test_proxy_embedded.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Iterator

import httpx
import openai
import pytest

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.app import create_app
from agl_stream_ingest.proxy.config import ProxyConfig
from tests.ingest.fake_backend import BREAKS_MIDWAY, HOLD, POLICY_VERSION, REPLY, create_fake_backend, detokenize, render_chat
from tests.ingest.helpers import ServedApp, read_spans

pytestmark = pytest.mark.integration

BACKEND_KEY = "sk-backend-secret-0042"
CLIENT_TOKEN = "agl-client-token-0099"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def backend() -> Iterator[ServedApp]:
    with ServedApp(create_fake_backend()) as served:
        yield served


def _config(backend: ServedApp, **overrides: object) -> ProxyConfig:
    return ProxyConfig.from_mapping({"model_list": [
        {"model_name": "fake-model", "litellm_params": {"model": "openai/fake-model", "api_base": f"{backend.url}/v1",
                                                         "api_key": BACKEND_KEY}},
        {"model_name": "broken", "litellm_params": {"model": "openai/broken", "api_base": f"{backend.url}/v1",
                                                     "api_key": BACKEND_KEY}},
        {"model_name": BREAKS_MIDWAY, "litellm_params": {"model": f"openai/{BREAKS_MIDWAY}",
                                                          "api_base": f"{backend.url}/v1", "api_key": BACKEND_KEY}},
    ]}, **overrides)


@pytest.fixture
def proxy(topics: Settings, backend: ServedApp) -> Iterator[ServedApp]:
    backend.server.config.app.state.requests.clear()
    app = create_app(topics, IngestOptions(token=CLIENT_TOKEN, max_body_bytes=64 * 1024), _config(backend))
    with ServedApp(app) as served:
        yield served


def _client(proxy: ServedApp, rollout: str = "ro-proxytest01", attempt: str = "at-00000001") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.url}/rollout/{rollout}/attempt/{attempt}/v1", api_key=CLIENT_TOKEN,
                              max_retries=0)


async def test_chat_completion_is_recorded_with_token_ids_and_policy_version(
    topics: Settings, proxy: ServedApp, backend: ServedApp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = _client(proxy)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    first = await client.chat.completions.create(model="fake-model", messages=MESSAGES, temperature=0.5, tools=tools)
    second = await client.chat.completions.create(model="fake-model", messages=MESSAGES, max_tokens=5)
    assert first.choices[0].message.content == REPLY
    assert second.choices[0].message.content == REPLY[:5]

    got = sorted((span for _, span in await read_spans(topics, expected=2)), key=lambda s: s.sequence_id)
    assert [s.sequence_id for s in got] == [1, 2]
    span = got[0]
    assert (span.rollout_id, span.attempt_id, span.name, span.kind) == ("ro-proxytest01", "at-00000001",
                                                                       "openai.chat.completion", "CLIENT")
    a = span.attributes
    assert detokenize(a["prompt_token_ids"]) == render_chat(MESSAGES)
    assert detokenize(a["response_token_ids"]) == REPLY
    assert a["agl.policy_version"] == POLICY_VERSION
    assert a["gen_ai.request.model"] == "fake-model" and a["gen_ai.request.type"] == "chat"
    assert a["gen_ai.request.temperature"] == 0.5 and a["gen_ai.request.streaming"] is False
    assert json.loads(a["gen_ai.request.tools"]) == tools
    assert (a["gen_ai.prompt.0.role"], a["gen_ai.prompt.1.content"]) == ("system", "Say hello.")
    assert a["gen_ai.completion.0.content"] == REPLY and a["gen_ai.completion.0.finish_reason"] == "stop"
    assert a["gen_ai.usage.completion_tokens"] == len(REPLY.encode())
    assert a["gen_ai.response.id"] == "cmpl-fake" and span.status.status_code == "OK"
    assert span.end_time >= span.start_time and a["agl.llm.latency_ms"] >= 0
    assert got[1].attributes["gen_ai.request.max_tokens"] == 5

    # The backend was asked for token ids with the backend's key; the client's token went nowhere.
    forwarded = backend.server.config.app.state.requests[0]
    assert forwarded["body"]["return_token_ids"] is True
    assert not [k for k in forwarded["body"] if k.startswith("_")]  # litellm-internal switches stay internal
    assert forwarded["headers"]["authorization"] == f"Bearer {BACKEND_KEY}"
    recorded = json.dumps([s.model_dump() for s in got])
    for secret in (BACKEND_KEY, CLIENT_TOKEN):
        assert secret not in recorded
        assert secret not in caplog.text


async def test_streamed_chat_passes_chunks_through_and_records_full_token_ids(topics: Settings, backend: ServedApp) -> None:
    app = create_app(topics, IngestOptions(), _config(backend, logprobs=0))
    with ServedApp(app) as proxy:
        stream = await _client(proxy).chat.completions.create(model="fake-model", messages=MESSAGES, stream=True)
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert len(pieces) > 2 and "".join(pieces) == REPLY
    [(_, span)] = await read_spans(topics, expected=1)
    a = span.attributes
    assert detokenize(a["response_token_ids"]) == REPLY
    assert detokenize(a["prompt_token_ids"]) == render_chat(MESSAGES)
    assert len(a["response_logprobs"]) == len(a["response_token_ids"])
    assert a["gen_ai.request.streaming"] is True and a["gen_ai.completion.0.content"] == REPLY
    assert a["gen_ai.usage.prompt_tokens"] == len(render_chat(MESSAGES).encode())
    assert a["agl.policy_version"] == POLICY_VERSION


@pytest.mark.parametrize("stream", [False, True])
async def test_text_completions_are_recorded(topics: Settings, proxy: ServedApp, stream: bool) -> None:
    client = _client(proxy)
    if stream:
        chunks = [c async for c in await client.completions.create(model="fake-model", prompt="abc", stream=True)]
        text = "".join(c.choices[0].text for c in chunks if c.choices)
    else:
        text = (await client.completions.create(model="fake-model", prompt="abc", logprobs=1)).choices[0].text
    assert text == REPLY
    [(_, span)] = await read_spans(topics, expected=1)
    a = span.attributes
    assert a["gen_ai.request.type"] == "completion" and a["gen_ai.prompt.0.content"] == "abc"
    assert detokenize(a["prompt_token_ids"]) == "abc" and detokenize(a["response_token_ids"]) == REPLY
    if not stream:
        assert len(a["response_logprobs"]) == len(REPLY)


async def test_headers_route_and_client_sequence_ids(topics: Settings, proxy: ServedApp) -> None:
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_TOKEN, max_retries=0)
    headers = {"x-rollout-id": "ro-hdr", "x-attempt-id": "at-hdr", "x-sequence-id": "41",
               "traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"}
    await client.chat.completions.create(model="fake-model", messages=MESSAGES, extra_headers=headers)
    del headers["x-sequence-id"]
    await client.chat.completions.create(model="fake-model", messages=MESSAGES, extra_headers=headers)
    got = sorted((s for _, s in await read_spans(topics, expected=2)), key=lambda s: s.sequence_id)
    assert [(s.rollout_id, s.sequence_id) for s in got] == [("ro-hdr", 41), ("ro-hdr", 42)]
    assert got[0].trace_id == "ab" * 16 and got[0].parent_id == "cd" * 8


async def test_backend_failure_answers_502_and_records_an_error_span(topics: Settings, proxy: ServedApp) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        await _client(proxy).chat.completions.create(model="broken", messages=MESSAGES)
    assert info.value.status_code == 502 and "backend exploded" in info.value.message
    [(_, span)] = await read_spans(topics, expected=1)
    assert span.status.status_code == "ERROR" and "backend exploded" in (span.status.description or "")
    assert BACKEND_KEY not in json.dumps(span.model_dump())


async def test_bad_requests_get_4xx_with_reasons_and_record_nothing(topics: Settings, proxy: ServedApp) -> None:
    path = f"{proxy.url}/rollout/ro-bad/attempt/at-bad/v1/chat/completions"
    auth = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
    good = {"model": "fake-model", "messages": MESSAGES}
    cases = [
        ({"content": b"{nope", "headers": auth}, 400, "invalid JSON"),
        ({"json": [1, 2], "headers": auth}, 400, "JSON object"),
        ({"json": {"messages": MESSAGES}, "headers": auth}, 400, "'model' is required"),
        ({"json": {"model": "fake-model", "messages": "hi"}, "headers": auth}, 400, "'messages'"),
        ({"json": {"model": "gpt-9", "messages": MESSAGES}, "headers": auth}, 404, "not served here"),
        ({"json": good}, 401, "missing bearer token"),
        ({"json": good, "headers": {"Authorization": "Bearer wrong"}}, 401, "invalid bearer token"),
        ({"content": b"x" * (65 * 1024), "headers": {**auth, "Content-Type": "application/json"}}, 413, "exceeds"),
        ({"content": b"model=x", "headers": {**auth, "Content-Type": "application/x-www-form-urlencoded"}}, 415,
         "Content-Type"),
        ({"json": good, "headers": {**auth, "x-sequence-id": "-1"}}, 400, "x-sequence-id"),
    ]
    async with httpx.AsyncClient() as client:
        for kwargs, status, reason in cases:
            answer = await client.post(path, **kwargs)
            assert answer.status_code == status, (reason, answer.text)
            assert reason in answer.json()["error"]["message"]
        unprefixed = await client.post(f"{proxy.url}/v1/chat/completions", json=good, headers=auth)
        assert unprefixed.status_code == 400 and "x-rollout-id" in unprefixed.json()["error"]["message"]
        models = await client.get(f"{proxy.url}/v1/models", headers=auth)
        assert [m["id"] for m in models.json()["data"]] == ["breaks-midway", "broken", "fake-model"]
        ok = await client.post(path, json=good, headers=auth)
        assert ok.status_code == 200 and ok.json()["choices"][0]["token_ids"]
    got = await read_spans(topics, expected=1, settle=1.0)
    assert [(key, s.sequence_id) for key, s in got] == [("ro-bad", 1)]


async def test_a_stream_the_client_abandons_is_still_recorded(topics: Settings, proxy: ServedApp) -> None:
    url = f"{proxy.url}/rollout/ro-gone/attempt/at-gone/v1/chat/completions"
    body = {"model": "fake-model", "messages": MESSAGES, "stream": True, "user": "slow"}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {CLIENT_TOKEN}"}) as client:
        async with client.stream("POST", url, json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    break  # hang up after the first chunk
    [(_, span)] = await read_spans(topics, expected=1)
    assert span.status.status_code == "ERROR" and span.status.description == "client disconnected"
    # What was generated until the proxy noticed (the server sees a hang-up only when a write fails).
    assert REPLY.startswith(detokenize(span.attributes["response_token_ids"]))


async def test_a_stream_the_backend_breaks_off_ends_with_an_error_event_and_is_recorded_as_failed(
    topics: Settings, proxy: ServedApp
) -> None:
    url = f"{proxy.url}/rollout/ro-broken/attempt/at-broken/v1/chat/completions"
    body = {"model": BREAKS_MIDWAY, "messages": MESSAGES, "stream": True}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {CLIENT_TOKEN}"}, timeout=60) as client:
        async with client.stream("POST", url, json=body) as response:
            data = [line.removeprefix("data: ") async for line in response.aiter_lines() if line.startswith("data: ")]
    assert "[DONE]" not in data  # the client is not told the answer was whole
    error = json.loads(data[-1])["error"]
    assert error["type"] == "server_error" and error["code"] >= 500
    [(_, span)] = await read_spans(topics, expected=1)
    assert span.status.status_code == "ERROR" and span.status.description == error["message"]
    assert REPLY.startswith(detokenize(span.attributes.get("response_token_ids", [])))  # what came before the break


async def test_upstream_v1_routes_a_call_and_a_reward_event_become_the_attempts_spans(topics: Settings, proxy: ServedApp) -> None:
    """What v1.0's controller hands an agent (AGL_OPENAI_BASE_URL with its mode segment, AGL_EVENT_URL, AGL_KEY),
    used as a v1.0 agent uses it."""
    from agl_stream.emitter import find_final_reward

    rollout, attempt = "ro-v1shape0001", "at-v1shape01"
    base = f"{proxy.url}/proxy/rollout/{rollout}/attempt/{attempt}/mode/train/openai/v1"
    events = f"{proxy.url}/api/rollouts/{rollout}/attempt/{attempt}/events"
    client = openai.AsyncOpenAI(base_url=base, api_key=CLIENT_TOKEN, max_retries=0)
    reply = await client.chat.completions.create(model="fake-model", messages=MESSAGES)
    assert reply.choices[0].message.content == REPLY
    auth = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
    async with httpx.AsyncClient() as http:
        posted = await http.post(events, json={"event_type": "reward", "data": {"value": 1.0, "reason": "exact"}}, headers=auth)
        assert posted.status_code == 200 and posted.json() == {"event_type": "reward", "sequence_id": 2}
        other = await http.post(events, json={"event_type": "agent_output", "data": {"patch": "diff"}}, headers=auth)
        assert other.status_code == 200
        refusals = [
            (await http.post(events, json={"event_type": "reward", "data": {"value": "high"}}, headers=auth), 400,
             "needs a number in data.value"),
            (await http.post(events, json={"data": {}}, headers=auth), 400, "event_type"),
            (await http.post(events, content=b"{nope", headers=auth), 400, "event is"),
            (await http.post(events, json={"event_type": "reward", "data": {"value": 1}}), 401, ""),
            (await http.post(base.replace("/mode/train/", "/mode/eval/") + "/chat/completions",
                             json={"model": "fake-model", "messages": MESSAGES}, headers=auth), 422, ""),
        ]  # fmt: skip
    for response, status, reason in refusals:
        assert response.status_code == status, response.text
        assert reason in response.text
    got = sorted((s for _, s in await read_spans(topics, expected=3)), key=lambda s: s.sequence_id)
    assert [(s.rollout_id, s.attempt_id, s.sequence_id) for s in got] == [(rollout, attempt, i) for i in (1, 2, 3)]
    assert got[0].name == "openai.chat.completion" and detokenize(got[0].attributes["response_token_ids"]) == REPLY
    assert find_final_reward(got) == 1.0 and got[1].attributes["agl.event.data.reason"] == "exact"
    assert got[2].attributes["agl.event.type"] == "agent_output" and json.loads(got[2].attributes["agl.event.data"]) == {"patch": "diff"}


async def test_pause_holds_new_calls_lets_calls_in_flight_finish_and_resume_lets_them_through(
    topics: Settings, proxy: ServedApp, backend: ServedApp
) -> None:
    """Around a weight update: pause answers once nothing is in flight; calls made meanwhile wait, then pass."""
    auth = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
    release = backend.server.config.app.state.release_held
    release.clear()

    async def state() -> dict[str, object]:
        return (await http.get(f"{proxy.url}/proxy/state", headers=auth)).json()  # type: ignore[no-any-return]

    async with httpx.AsyncClient(timeout=60) as http:
        held = asyncio.create_task(_client(proxy).chat.completions.create(model="fake-model", messages=[
            {"role": "user", "content": HOLD}]))  # answered once released
        for _ in range(1200):  # generous: on a loaded machine the call may take seconds to reach the door
            current = await state()
            if current["in_flight"] == 1 or held.done():
                break
            await asyncio.sleep(0.05)
        if held.done():
            await held  # it failed before it was held: show why
        assert current == {"paused": False, "in_flight": 1, "waiting": 0, "paused_seconds": None}
        pausing = asyncio.create_task(http.post(f"{proxy.url}/proxy/pause", params={"drain_timeout": 60}, headers=auth))
        for _ in range(1200):
            if (await state())["paused"]:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert not pausing.done() and not held.done()  # pause waits for the call in flight
        release.set()
        paused = (await pausing).json()
        assert held.done()  # pause answered only once the call in flight had finished
        assert (await held).choices[0].message.content == REPLY
        assert paused["paused"] is True and paused["drained"] is True and paused["in_flight"] == 0

        waiting = asyncio.create_task(_client(proxy).chat.completions.create(model="fake-model", messages=MESSAGES))
        for _ in range(1200):
            if (await state())["waiting"] == 1:
                break
            await asyncio.sleep(0.05)
        assert (await state())["waiting"] == 1 and not waiting.done()
        assert (await http.post(f"{proxy.url}/proxy/pause", headers={"Authorization": "Bearer nope"})).status_code == 401
        resumed = (await http.post(f"{proxy.url}/proxy/resume", headers=auth)).json()
        assert resumed["paused"] is False
        assert (await waiting).choices[0].message.content == REPLY
    assert len(await read_spans(topics, expected=2)) == 2
