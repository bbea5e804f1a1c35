"""The gateway's other APIs through their official SDKs: OpenAI Responses and Anthropic Messages, streamed and not.

Each call goes to the (deterministic, one token per byte) backend as a chat completion and is recorded as a
chat span whose token ids decode back to the prompt and the answer the SDK received; errors come back in the
API's own shape. The same APIs against the real embedded CPU model: test_proxy_embedded.py.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.app import create_app
from agl_stream_ingest.proxy.config import ProxyConfig
from tests.ingest.fake_backend import BREAKS_MIDWAY, POLICY_VERSION, REPLY, create_fake_backend, detokenize, render_chat
from tests.ingest.helpers import ServedApp, read_spans

pytestmark = pytest.mark.integration

CLIENT_TOKEN = "agl-client-token-0123"
ROLLOUT, ATTEMPT = "ro-dialects0001", "at-00000007"
SYSTEM, QUESTION = "Be brief.", "Say hello."
CHAT_MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def backend() -> Iterator[ServedApp]:
    with ServedApp(create_fake_backend()) as served:
        yield served


@pytest.fixture
def proxy(topics: Settings, backend: ServedApp) -> Iterator[ServedApp]:
    config = ProxyConfig.from_mapping({"model_list": [
        {"model_name": "fake-model", "litellm_params": {"model": "openai/fake-model", "api_base": f"{backend.url}/v1",
                                                         "api_key": "sk-backend"}},
        {"model_name": BREAKS_MIDWAY, "litellm_params": {"model": f"openai/{BREAKS_MIDWAY}",
                                                          "api_base": f"{backend.url}/v1", "api_key": "sk-backend"}},
    ]})  # fmt: skip
    with ServedApp(create_app(topics, IngestOptions(token=CLIENT_TOKEN), config)) as served:
        yield served


def _anthropic(proxy: ServedApp, key: str = CLIENT_TOKEN) -> anthropic.AsyncAnthropic:
    # what the controller sets: ANTHROPIC_BASE_URL is the attempt's prefix (the SDK appends /v1/messages)
    return anthropic.AsyncAnthropic(base_url=f"{proxy.url}/rollout/{ROLLOUT}/attempt/{ATTEMPT}", api_key=key,
                                    max_retries=0)  # fmt: skip


def _openai(proxy: ServedApp, base: str = "") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base or f"{proxy.url}/rollout/{ROLLOUT}/attempt/{ATTEMPT}/v1",
                              api_key=CLIENT_TOKEN, max_retries=0)  # fmt: skip


def _check_span(span: Any, api: str, streaming: bool) -> None:
    a = span.attributes
    assert (span.rollout_id, span.attempt_id, span.name) == (ROLLOUT, ATTEMPT, "openai.chat.completion")
    assert a["agl.proxy.api"] == api and a["gen_ai.request.streaming"] is streaming
    assert detokenize(a["prompt_token_ids"]) == render_chat(CHAT_MESSAGES)  # the system prompt became a message
    assert detokenize(a["response_token_ids"]) == REPLY
    assert a["agl.policy_version"] == POLICY_VERSION and span.status.status_code == "OK"


async def test_anthropic_messages(topics: Settings, proxy: ServedApp) -> None:
    message = await _anthropic(proxy).messages.create(model="fake-model", max_tokens=64, system=SYSTEM,
                                                      messages=[{"role": "user", "content": QUESTION}])  # fmt: skip
    assert message.type == "message" and message.role == "assistant"
    assert [block.text for block in message.content] == [REPLY]  # type: ignore[union-attr]
    # the fake backend ends every call that names max_tokens with "length", the Messages API's "max_tokens"
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == len(REPLY.encode())
    [(_, span)] = await read_spans(topics, expected=1)
    _check_span(span, "anthropic.messages", streaming=False)


async def test_anthropic_messages_streamed(topics: Settings, proxy: ServedApp) -> None:
    async with _anthropic(proxy).messages.stream(model="fake-model", max_tokens=64, system=SYSTEM,
                                                 messages=[{"role": "user", "content": QUESTION}]) as stream:  # fmt: skip
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert len(pieces) > 2 and "".join(pieces) == REPLY
    assert [block.text for block in final.content] == [REPLY]  # type: ignore[union-attr]
    [(_, span)] = await read_spans(topics, expected=1)
    _check_span(span, "anthropic.messages", streaming=True)


async def test_a_stream_the_backend_breaks_off_ends_in_the_apis_error_event_and_is_recorded_as_failed(
    topics: Settings, proxy: ServedApp
) -> None:
    with pytest.raises(anthropic.APIStatusError) as broken:
        async with _anthropic(proxy).messages.stream(model=BREAKS_MIDWAY, max_tokens=64,
                                                     messages=[{"role": "user", "content": QUESTION}]) as stream:  # fmt: skip
            _ = [text async for text in stream.text_stream]
    assert broken.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    [(_, span)] = await read_spans(topics, expected=1)
    assert span.attributes["agl.proxy.api"] == "anthropic.messages" and span.status.status_code == "ERROR"
    assert REPLY.startswith(detokenize(span.attributes.get("response_token_ids", [])))  # what came before the break


async def test_openai_responses(topics: Settings, proxy: ServedApp) -> None:
    response = await _openai(proxy).responses.create(model="fake-model", instructions=SYSTEM, input=QUESTION)
    assert response.output_text == REPLY and response.status == "completed"
    [(_, span)] = await read_spans(topics, expected=1)
    _check_span(span, "openai.responses", streaming=False)


async def test_openai_responses_streamed_on_upstream_v1_route(topics: Settings, proxy: ServedApp) -> None:
    base = f"{proxy.url}/proxy/rollout/{ROLLOUT}/attempt/{ATTEMPT}/mode/train/openai/v1"  # v1.0's AGL_OPENAI_BASE_URL
    stream = await _openai(proxy, base).responses.create(model="fake-model", instructions=SYSTEM, input=QUESTION,
                                                         stream=True)  # fmt: skip
    events = [event async for event in stream]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 2 and "".join(deltas) == REPLY
    assert events[-1].type == "response.completed" and events[-1].response.output_text == REPLY
    [(_, span)] = await read_spans(topics, expected=1)
    _check_span(span, "openai.responses", streaming=True)


async def test_errors_come_back_in_each_apis_shape(topics: Settings, proxy: ServedApp,
                                                   caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await _anthropic(proxy, key="wrong-key").messages.create(model="fake-model", max_tokens=8,
                                                                 messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await _anthropic(proxy).messages.create(model="no-such-model", max_tokens=8,
                                                messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert "not served here" in unknown.value.body["error"]["message"]  # type: ignore[index]
    async with httpx.AsyncClient(base_url=f"{proxy.url}/rollout/{ROLLOUT}/attempt/{ATTEMPT}") as http:
        refused_body = await http.post("/v1/messages", headers={"x-api-key": CLIENT_TOKEN},
                                       json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
    assert refused_body.status_code == 400, refused_body.text
    assert refused_body.json()["type"] == "error" and "max_tokens" in refused_body.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="keeps no conversation state"):
        await _openai(proxy).responses.create(model="fake-model", input="hi", previous_response_id="resp_123")
    with pytest.raises(openai.BadRequestError, match="'input' is required"):
        await _openai(proxy).responses.create(model="fake-model", input=[])
    assert "wrong-key" not in caplog.text
