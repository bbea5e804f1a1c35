"""The embedded OpenAI-compatible server: token ids, logprobs, batching, streaming and weight swaps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import torch
from safetensors.torch import save_file

from agl_stream_trainer.backends.hf import unique_state_dict
from agl_stream_trainer.engines.embedded import EmbeddedEngine, EmbeddedServer
from agl_stream_trainer.engines.generation import Generator


@pytest.fixture
def served(tiny) -> Iterator[tuple[EmbeddedServer, Generator, Any]]:
    model, tokenizer = tiny
    generator = Generator(model, tokenizer, max_batch_rows=16)
    server = EmbeddedServer(generator, "tiny").start()
    yield server, generator, tokenizer
    server.stop()
    generator.close()


def _perturbed(model: Any, scale: float = 0.5) -> dict[str, torch.Tensor]:
    torch.manual_seed(123)
    return {k: v + scale * torch.randn_like(v) for k, v in unique_state_dict(model).items()}


def test_token_ids_decode_to_prompt_and_completion(served) -> None:
    server, _gen, tokenizer = served
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url + "/v1", api_key="none")
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "What is 2+2?"}], max_tokens=12, logprobs=True, seed=7,
        extra_body={"return_token_ids": True},
    )
    raw = chat.model_dump()
    prompt_ids = raw["prompt_token_ids"]
    choice = raw["choices"][0]
    assert tokenizer.decode(prompt_ids) == tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.decode(choice["token_ids"], skip_special_tokens=True) == choice["message"]["content"]
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert all(lp["logprob"] <= 0 for lp in choice["logprobs"]["content"])
    assert raw["policy_version"] == 0 and raw["model"] == "tiny"

    comp = client.completions.create(model="tiny", prompt="The capital of France is", max_tokens=6, logprobs=0, n=2)
    raw = comp.model_dump()
    assert tokenizer.decode(raw["prompt_token_ids"]) == "The capital of France is"
    assert len(raw["choices"]) == 2
    for c in raw["choices"]:
        assert tokenizer.decode(c["token_ids"], skip_special_tokens=True) == c["text"]
        assert len(c["logprobs"]["token_logprobs"]) == len(c["token_ids"])
    assert raw["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in raw["choices"])


def test_logprobs_are_the_models_raw_logprobs(served, tiny) -> None:
    server, gen, tokenizer = served
    resp = httpx.post(server.base_url + "/v1/completions",
                      json={"prompt": [100, 200, 300, 400], "max_tokens": 5, "temperature": 0, "logprobs": 0}, timeout=60)
    doc = resp.json()
    ids = doc["prompt_token_ids"] + doc["choices"][0]["token_ids"]
    with torch.no_grad():
        logits = gen.model(input_ids=torch.tensor([ids])).logits[0].float()
    want = torch.log_softmax(logits, -1)[torch.arange(3, len(ids) - 1), torch.tensor(ids[4:])]
    assert doc["choices"][0]["logprobs"]["token_logprobs"] == pytest.approx(want.tolist(), abs=1e-4)
    # greedy picks the argmax at every step
    assert doc["choices"][0]["token_ids"] == logits[3:-1].argmax(-1).tolist()


async def test_concurrent_requests_are_batched(served) -> None:
    server, gen, _tok = served
    batches_before = gen.batches_run
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        replies = await asyncio.gather(*[
            client.post("/v1/completions", json={"prompt": f"request number {i}", "max_tokens": 16, "temperature": 0})
            for i in range(8)
        ])
    assert all(r.status_code == 200 for r in replies)
    assert all(len(r.json()["choices"][0]["token_ids"]) >= 1 for r in replies)
    assert gen.batches_run - batches_before < 8  # some requests shared a batch


async def test_swap_weights_without_dropping_in_flight_requests(served, tiny, tmp_path: Path) -> None:
    server, gen, _tok = served
    model, _ = tiny
    new_weights = _perturbed(model)
    path = tmp_path / "v1.safetensors"
    save_file(new_weights, str(path))
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        body = {"prompt": "a long story", "max_tokens": 48, "temperature": 0}
        in_flight = [asyncio.create_task(client.post("/v1/completions", json=body)) for _ in range(4)]
        for _ in range(3000):  # until a batch is decoding
            if gen.generating:
                break
            await asyncio.sleep(0.005)
        assert gen.generating, "no batch started"
        swap = await client.post("/agl/v1/weights", json={"path": str(path), "version": 1})
        assert swap.status_code == 200 and swap.json()["version"] == 1
        after = await client.post("/v1/completions", json=body)
        first = await asyncio.gather(*in_flight)
    assert all(r.status_code == 200 for r in first)  # nothing dropped
    versions = [r.json()["policy_version"] for r in first]
    assert 0 in versions and set(versions) <= {0, 1}  # the running batch finished on the weights it started with
    assert after.json()["policy_version"] == 1 and after.headers["x-agl-policy-version"] == "1"
    for name, tensor in new_weights.items():
        assert torch.equal(gen.model.state_dict()[name], tensor)


async def test_streaming_sse_matches_non_streaming(served) -> None:
    server, _gen, tokenizer = served
    body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 10, "temperature": 0}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
        plain = (await client.post("/v1/chat/completions", json=body)).json()
        text, ids, prompt_ids, finish = "", [], None, None
        async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                prompt_ids = chunk.get("prompt_token_ids", prompt_ids)
                c = chunk["choices"][0]
                text += c.get("delta", {}).get("content", "") or ""
                ids += c["token_ids"]
                finish = c["finish_reason"] or finish
    assert ids == plain["choices"][0]["token_ids"]
    assert text == plain["choices"][0]["message"]["content"]
    assert prompt_ids == plain["prompt_token_ids"] and finish == plain["choices"][0]["finish_reason"]


async def test_engine_publish_over_http(served, tiny, tmp_path: Path) -> None:
    server, gen, _tok = served
    model, _ = tiny
    engine = EmbeddedEngine(server.base_url, "tiny", publish_dir=tmp_path / "pub")  # remote mode: file + POST
    weights = _perturbed(model, 0.1)
    await engine.publish(3, weights)
    assert gen.policy_version == 3
    assert torch.equal(gen.model.state_dict()["model.norm.weight"], weights["model.norm.weight"])
    assert list((tmp_path / "pub").glob("policy-v00000003.safetensors"))
