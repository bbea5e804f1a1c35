"""Per-attempt keys at the proxy, on a real broker and two replicas: a key writes only its own attempt, works on
any replica, stops working when its attempt finishes, and is never logged or recorded."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Iterator

import httpx
import pytest

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.service import mint_attempt_key
from agl_stream.types import AttemptEvent
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.app import create_app
from tests.ingest.fake_backend import create_fake_backend
from tests.ingest.helpers import ServedApp, read_spans
from tests.ingest.test_proxy import MESSAGES, _config

pytestmark = pytest.mark.integration

SECRET = "attempt-key-secret-0077"
TOKEN = "agl-shared-token-0055"


@pytest.fixture(scope="module")
def backend() -> Iterator[ServedApp]:
    with ServedApp(create_fake_backend()) as served:
        yield served


@pytest.fixture
def replicas(topics: Settings, backend: ServedApp) -> Iterator[tuple[ServedApp, ServedApp]]:
    options = IngestOptions(token=TOKEN, attempt_key_secret=SECRET)
    with ServedApp(create_app(topics, options, _config(backend))) as a, ServedApp(create_app(topics, options, _config(backend))) as b:
        yield a, b


async def _chat(http: httpx.AsyncClient, proxy: ServedApp, rollout: str, attempt: str, key: str) -> httpx.Response:
    return await http.post(f"{proxy.url}/rollout/{rollout}/attempt/{attempt}/v1/chat/completions",
                           json={"model": "fake-model", "messages": MESSAGES}, headers={"Authorization": f"Bearer {key}"})  # fmt: skip


async def test_a_key_writes_its_attempt_only_on_any_replica_until_the_attempt_finishes(
    topics: Settings, replicas: tuple[ServedApp, ServedApp], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a, b = replicas
    key_a = mint_attempt_key(SECRET, "ro-keysa0001", "at-keysa001")
    key_b = mint_attempt_key(SECRET, "ro-keysb0001", "at-keysb001")
    forged = mint_attempt_key("not-the-secret", "ro-keysa0001", "at-keysa001")
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await _chat(http, a, "ro-keysa0001", "at-keysa001", key_a)).status_code == 200
        assert (await _chat(http, b, "ro-keysa0001", "at-keysa001", key_a)).status_code == 200  # the other replica
        wrong = await _chat(http, a, "ro-keysb0001", "at-keysb001", key_a)
        assert wrong.status_code == 403 and "cannot write attempt at-keysb001" in wrong.text
        by_header = await http.post(f"{b.url}/v1/chat/completions", json={"model": "fake-model", "messages": MESSAGES},
                                    headers={"Authorization": f"Bearer {key_a}", "x-rollout-id": "ro-keysb0001",
                                             "x-attempt-id": "at-keysb001"})  # fmt: skip
        assert by_header.status_code == 403
        event = await http.post(f"{a.url}/api/rollouts/ro-keysb0001/attempt/at-keysb001/events",
                                json={"event_type": "reward", "data": {"value": 1}}, headers={"Authorization": f"Bearer {key_a}"})  # fmt: skip
        assert event.status_code == 403
        for path, body in (("v1/messages", {"model": "fake-model", "max_tokens": 8, "messages": MESSAGES[1:]}),
                           ("v1/responses", {"model": "fake-model", "input": "hi"})):  # the other APIs, same rule
            other_api = await http.post(f"{a.url}/rollout/ro-keysb0001/attempt/at-keysb001/{path}", json=body,
                                        headers={"x-api-key": key_a})  # fmt: skip
            assert other_api.status_code == 403 and "cannot write attempt at-keysb001" in other_api.text
        assert (await _chat(http, a, "ro-keysa0001", "at-keysa001", forged)).status_code == 401
        assert (await _chat(http, a, "ro-keysb0001", "at-keysb001", TOKEN)).status_code == 200  # the shared token

        async with RecordProducer(topics) as producer:
            finished = AttemptEvent(kind="finished", rollout_id="ro-keysa0001", attempt_id="at-keysa001",
                                    attempt_sequence_id=1, status="succeeded", worker_id="Worker-0", span_count=2)  # fmt: skip
            await producer.send_and_wait(topics.topic("attempts"), finished, key="ro-keysa0001")
        for proxy in (a, b):  # each replica reads agl.attempts itself
            for _ in range(200):
                refused = await _chat(http, proxy, "ro-keysa0001", "at-keysa001", key_a)
                if refused.status_code != 200:
                    break
                await asyncio.sleep(0.1)
            assert refused.status_code == 401 and "at-keysa001 of rollout ro-keysa0001 has finished" in refused.text
        assert (await _chat(http, b, "ro-keysb0001", "at-keysb001", key_b)).status_code == 200  # B still runs
        async with RecordProducer(topics) as producer:  # a record no replica can decode revokes nothing: counted
            await producer.send_and_wait(topics.topic("attempts"), b"not an attempt event", key="ro-keysa0001")
        for _ in range(200):
            health = (await http.get(f"{a.url}/health")).json()
            if health["finished_attempts"]["unreadable"]:
                break
            await asyncio.sleep(0.1)
        assert health["status"] == "ok" and health["finished_attempts"]["caught_up"] is True
        assert health["finished_attempts"]["unreadable"] == 1 and health["finished_attempts"]["remembered"] >= 1

    recorded = json.dumps([span.model_dump() for _, span in await read_spans(topics, expected=4)])
    for secret in (key_a, key_b, forged, SECRET, TOKEN):
        assert secret not in recorded and secret not in caplog.text
