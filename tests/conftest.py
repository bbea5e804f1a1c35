"""Shared fixtures: a real local broker and per-test topic namespaces.

The broker is the local stack's choice (``agl_stream.broker.choose_local_broker``): Apache Kafka
where Java 17+ is here, else Tansu with a notice; ``AGL_LOCAL_BROKER=kafka`` (as ``.ci/run`` sets)
makes a missing Kafka an error instead. It is started once per test session; every test that
needs topics gets its own ``topic_prefix`` so tests never see each other's records. The broker-parity
tests (``tests/parity``) start one broker of each kind themselves.
"""

from __future__ import annotations

import os
import secrets
from typing import AsyncIterator, Iterator

import pytest

from agl_stream.broker import choose_local_broker, describe, local_broker
from agl_stream.config import Settings


def pytest_report_header(config: pytest.Config) -> str:
    """Which broker the suite runs on, in the session header of every log."""
    external = os.environ.get("AGL_TEST_KAFKA_BOOTSTRAP")
    if external:
        return f"broker: the cluster at {external} (AGL_TEST_KAFKA_BOOTSTRAP)"
    kind = choose_local_broker(Settings.from_env())
    return "broker: " + ("Apache Kafka (local KRaft)" if kind == "kafka" else "Tansu (fallback: no Apache Kafka here)")


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real broker: ``AGL_TEST_KAFKA_BOOTSTRAP`` if set, else the local broker."""
    external = os.environ.get("AGL_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    folder = tmp_path_factory.mktemp("broker")
    with local_broker(Settings.from_env(), log_file=folder / "broker.log", data_dir=folder / "data") as broker:
        print(f"\nsession broker: {describe(broker)}")
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
