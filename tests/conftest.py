"""Shared fixtures: a real local Kafka-protocol broker (Tansu) and per-test topic namespaces.

The broker is started once per test session (it starts in ~50 ms); every test that needs topics
gets its own ``topic_prefix`` so tests never see each other's records.
"""

from __future__ import annotations

import os
import secrets
from typing import AsyncIterator, Iterator

import pytest

from agl_stream.broker import LocalBroker
from agl_stream.config import Settings


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real broker: ``AGL_TEST_KAFKA_BOOTSTRAP`` if set, else a local Tansu."""
    external = os.environ.get("AGL_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with LocalBroker(log_file=log) as broker:
        yield broker.bootstrap


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path) -> Settings:  # type: ignore[no-untyped-def]
    """Settings pointing at the test broker, with a unique topic prefix and a private data dir."""
    return Settings.from_env(
        env={},
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=f"t{secrets.token_hex(4)}",
        partitions=2,
        kafka_session_timeout_ms=6000,
        data_dir=tmp_path / "agl",
    )


@pytest.fixture
async def topics(settings: Settings) -> AsyncIterator[Settings]:
    """``settings`` with every catalog topic created on the broker."""
    from agl_stream_topics.admin import ensure_topics

    report = await ensure_topics(settings, strict=True)
    assert report.ok
    yield settings
