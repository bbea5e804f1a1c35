"""Receiver answers when the broker does not acknowledge, and for spans too big for a record.

The broker side is replaced by a publisher that refuses (pure HTTP/OTLP logic under test); the
real-broker paths are in test_otlp_receiver.py.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.otlp.app import create_app
from agl_stream_ingest.publisher import PublishError, SpanPublisher
from tests.ingest.helpers import ServedApp
from tests.ingest.otlp_samples import attempt_resource, export_request, otlp_span

PB = {"Content-Type": "application/x-protobuf"}


class RefusingPublisher(SpanPublisher):
    """Encodes like the real one; every produce fails as if the broker never acknowledged."""

    def __init__(self) -> None:
        super().__init__(Settings.from_env(env={}, kafka_bootstrap="127.0.0.1:9"), "otlp")
        self.published: list[Sequence[tuple[str, bytes]]] = []

    @property
    def max_record_bytes(self) -> int:
        return 1024 * 1024 - 512

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def publish(self, records: Sequence[tuple[str, bytes]]) -> None:
        self.published.append(records)
        if records:
            raise PublishError("broker did not acknowledge (simulated)")


@pytest.fixture
def served() -> Iterator[tuple[ServedApp, RefusingPublisher]]:
    publisher = RefusingPublisher()
    app = create_app(publisher.settings, IngestOptions(max_body_bytes=4 * 1024 * 1024), publisher=publisher)
    with ServedApp(app) as server:
        yield server, publisher


def test_unacknowledged_spans_answer_503_with_retry_after(served: tuple[ServedApp, RefusingPublisher]) -> None:
    server, _ = served
    body = export_request([otlp_span("a")], attempt_resource("ro", "at")).SerializeToString()
    answer = httpx.post(f"{server.url}/v1/traces", content=body, headers=PB)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    assert "did not acknowledge" in status_pb2.Status.FromString(answer.content).message


def test_a_span_bigger_than_a_record_is_rejected_per_span(served: tuple[ServedApp, RefusingPublisher]) -> None:
    server, publisher = served
    big = otlp_span("big", {"payload": "x" * (1024 * 1024 + 10)})
    body = export_request([big], attempt_resource("ro", "at")).SerializeToString()
    answer = httpx.post(f"{server.url}/v1/traces", content=body, headers=PB)
    assert answer.status_code == 200
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1 and "above the broker limit" in partial.error_message
    assert publisher.published == [[]]  # nothing was handed to the broker
