"""The learner pauses the LLM proxies around a weight update: real proxy replicas, the real broker.

The engine here only notes what the proxies said while it "loaded" the weights; what is under test is
the protocol with the proxies: every replica paused (its calls in flight finished first) before the
engine is touched, every replica resumed after, and an unreachable replica never stopping training.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import httpx
import openai
import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.app import create_app
from agl_stream_ingest.proxy.config import ProxyConfig
from agl_stream_trainer.proxy_pause import ProxyPause, ProxyPauseConfig
from agl_stream_trainer.publisher import WeightPublisher
from tests.ingest.fake_backend import HOLD, REPLY, create_fake_backend
from tests.ingest.helpers import ServedApp

pytestmark = pytest.mark.integration

TOKEN = "pause-token"


class NotingEngine:
    """Stands in for vLLM's weight load: notes each replica's state while it runs."""

    endpoint = "http://engine.test/v1"
    model_name = "tiny"

    def __init__(self, replicas: list[ServedApp]) -> None:
        self.replicas = replicas
        self.seen: list[list[dict[str, Any]]] = []

    async def publish(self, version: int, weights: Any) -> None:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            self.seen.append([(await http.get(f"{r.url}/proxy/state")).json() for r in self.replicas])

    async def close(self) -> None:
        return None


@pytest.fixture
def replicas(topics: Settings) -> Iterator[tuple[ServedApp, ServedApp, ServedApp]]:
    with ServedApp(create_fake_backend()) as backend:
        config = ProxyConfig.from_mapping({"model_list": [{"model_name": "fake-model", "litellm_params": {
            "model": "openai/fake-model", "api_base": f"{backend.url}/v1", "api_key": "k"}}]})  # fmt: skip
        with ServedApp(create_app(topics, IngestOptions(token=TOKEN), config)) as a, \
                ServedApp(create_app(topics, IngestOptions(token=TOKEN), config)) as b:  # fmt: skip
            yield a, b, backend


async def test_every_replica_is_drained_and_paused_while_the_engine_loads(
    topics: Settings, replicas: tuple[ServedApp, ServedApp, ServedApp], caplog: pytest.LogCaptureFixture
) -> None:
    a, b, backend = replicas
    engine = NotingEngine([a, b])
    pause = ProxyPause(ProxyPauseConfig(urls=[a.url, b.url, "http://127.0.0.1:9/"], drain_timeout_s=30), TOKEN)
    release = backend.server.config.app.state.release_held
    release.clear()
    client = openai.AsyncOpenAI(base_url=f"{a.url}/rollout/ro-pause0001/attempt/at-pause001/v1", api_key=TOKEN,
                                max_retries=0)  # fmt: skip
    held = asyncio.create_task(client.chat.completions.create(model="fake-model",
                                                              messages=[{"role": "user", "content": HOLD}]))  # fmt: skip
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for _ in range(600):
            if (await http.get(f"{a.url}/proxy/state")).json()["in_flight"] == 1:
                break
            await asyncio.sleep(0.05)
    async with RecordProducer(topics) as producer:
        publisher = WeightPublisher(engine, producer, topics, proxy_pause=pause)  # type: ignore[arg-type]
        publishing = asyncio.create_task(publisher.publish(1, {}))
        await asyncio.sleep(1.0)
        assert engine.seen == [] and not publishing.done()  # replica a still had a call in flight
        release.set()
        await publishing
    assert (await held).choices[0].message.content == REPLY
    [states] = engine.seen
    assert [s["paused"] for s in states] == [True, True] and [s["in_flight"] for s in states] == [0, 0]
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert [(await http.get(f"{r.url}/proxy/state")).json()["paused"] for r in (a, b)] == [False, False]
    # the unreachable third replica: logged twice (pause, resume), never in the way of the update
    assert pause.failures == 2 and "could not pause the LLM proxy at http://127.0.0.1:9/" in caplog.text


async def test_no_urls_no_pause(topics: Settings) -> None:
    engine = NotingEngine([])
    async with RecordProducer(topics) as producer:
        publisher = WeightPublisher(engine, producer, topics, proxy_pause=ProxyPause(ProxyPauseConfig(), None))  # type: ignore[arg-type]
        result = await publisher.publish(2, {})
    assert result.version == 2 and engine.seen == [[]]
