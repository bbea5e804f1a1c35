"""The proxy in front of the real embedded CPU server (tiny random Llama, SmolLM2 tokenizer).

An OpenAI client talks to the proxy's per-attempt route; the recorded span's token ids must decode,
with the model's own tokenizer, back to the chat prompt and to the completion the client received.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import openai
import pytest

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.app import create_app
from agl_stream_ingest.proxy.config import ProxyConfig
from tests.ingest.helpers import ServedApp, read_spans

pytestmark = pytest.mark.integration

MODEL = "tiny-llama"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """(base URL, tokenizer) of a running embedded server; skipped with the reason if it cannot run."""
    try:
        from agl_stream_trainer.engines.embedded import EmbeddedServer
        from agl_stream_trainer.engines.generation import Generator
        from agl_stream_trainer.models import build_tiny_model, load_model_and_tokenizer
    except ImportError as exc:  # the trainer extra (torch, transformers) is not installed
        pytest.skip(f"embedded server unavailable: {exc}")
    directory: Path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", seed=0)
    model, tokenizer, _ = load_model_and_tokenizer(str(directory))
    generator = Generator(model, tokenizer, policy_version=3)
    server = EmbeddedServer(generator, MODEL).start()
    try:
        yield server.base_url, tokenizer
    finally:
        server.stop()
        generator.close()


@pytest.fixture
def proxy(topics: Settings, embedded: tuple[str, Any]) -> Iterator[ServedApp]:
    base_url, _ = embedded
    config = ProxyConfig.from_backends([f"{MODEL}={base_url}/v1"], logprobs=0)
    with ServedApp(create_app(topics, IngestOptions(), config)) as served:
        yield served


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_openai_client_gets_a_completion_and_the_span_decodes_back(
    topics: Settings, proxy: ServedApp, embedded: tuple[str, Any], stream: bool
) -> None:
    _, tokenizer = embedded
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/rollout/ro-embedded01/attempt/at-0000000e/v1",
                                api_key="unused", max_retries=0)
    if stream:
        chunks = [c async for c in await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0.0, stream=True)]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert len(chunks) > 1
    else:
        answer = await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0.0)
        text = answer.choices[0].message.content or ""
        assert answer.usage is not None and answer.usage.completion_tokens > 0

    [(key, span)] = await read_spans(topics, expected=1)
    a = span.attributes
    assert key == "ro-embedded01" and span.attempt_id == "at-0000000e" and span.name == "openai.chat.completion"
    expected_prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(a["prompt_token_ids"]) == expected_prompt
    assert 0 < len(a["response_token_ids"]) <= 12
    assert tokenizer.decode(a["response_token_ids"], skip_special_tokens=True) == text
    assert a["gen_ai.completion.0.content"] == text
    assert len(a["response_logprobs"]) == len(a["response_token_ids"])
    assert all(lp <= 0.0 for lp in a["response_logprobs"])
    assert a["agl.policy_version"] == 3
    assert a["gen_ai.usage.prompt_tokens"] == len(a["prompt_token_ids"])
    assert a["gen_ai.usage.completion_tokens"] == len(a["response_token_ids"])
    assert a["gen_ai.request.streaming"] is stream


async def _other_api_call(proxy: ServedApp, api: str, stream: bool) -> str:
    """One call in ``api`` through its official SDK; the text the agent got."""
    prefix = f"{proxy.url}/rollout/ro-embedded02/attempt/at-0000000f"
    system, question = MESSAGES[0]["content"], MESSAGES[1]["content"]
    if api == "anthropic.messages":
        import anthropic

        async with anthropic.AsyncAnthropic(base_url=prefix, api_key="unused", max_retries=0) as claude:
            kwargs: dict[str, Any] = dict(model=MODEL, max_tokens=12, system=system,
                                          messages=[{"role": "user", "content": question}])  # fmt: skip
            if stream:
                async with claude.messages.stream(**kwargs) as events:
                    return "".join([text async for text in events.text_stream])
            message = await claude.messages.create(**kwargs)
            return "".join(block.text for block in message.content)  # type: ignore[union-attr]
    async with openai.AsyncOpenAI(base_url=f"{prefix}/v1", api_key="unused", max_retries=0) as client:
        if stream:
            events = await client.responses.create(model=MODEL, instructions=system, input=question,
                                                   max_output_tokens=12, temperature=0.0, stream=True)  # fmt: skip
            return "".join([e.delta async for e in events if e.type == "response.output_text.delta"])
        response = await client.responses.create(model=MODEL, instructions=system, input=question,
                                                 max_output_tokens=12, temperature=0.0)  # fmt: skip
        return response.output_text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["openai.responses", "anthropic.messages"])
async def test_responses_and_messages_apis_are_recorded_with_token_ids(
    topics: Settings, proxy: ServedApp, embedded: tuple[str, Any], api: str, stream: bool
) -> None:
    _, tokenizer = embedded
    text = await _other_api_call(proxy, api, stream)
    [(_, span)] = await read_spans(topics, expected=1)
    a = span.attributes
    assert a["agl.proxy.api"] == api and a["gen_ai.request.streaming"] is stream
    expected_prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(a["prompt_token_ids"]) == expected_prompt  # the system prompt became the system message
    assert 0 < len(a["response_token_ids"]) <= 12
    assert tokenizer.decode(a["response_token_ids"], skip_special_tokens=True) == text
    assert len(a["response_logprobs"]) == len(a["response_token_ids"]) and a["agl.policy_version"] == 3
