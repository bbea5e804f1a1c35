"""The OTLP/HTTP receiver against the real broker: what arrives on agl.spans and what is refused."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.otlp.app import create_app
from tests.ingest.helpers import ServedApp, read_spans
from tests.ingest.otlp_samples import attempt_resource, export_request, otlp_span

pytestmark = pytest.mark.integration

PROGRAM = Path(__file__).with_name("otel_program.py")
PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def receiver(topics: Settings) -> Iterator[ServedApp]:
    with ServedApp(create_app(topics, IngestOptions(max_body_bytes=64 * 1024))) as served:
        yield served


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
async def test_plain_opentelemetry_program_exports_arrive_on_agl_spans(
    topics: Settings, receiver: ServedApp, encoding: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(PROGRAM), f"{receiver.url}/v1/traces", "ro-0123456789ab", "at-01234567", encoding],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    got = await read_spans(topics, expected=3)
    assert {key for key, _ in got} == {"ro-0123456789ab"}
    spans = {span.name: span for _, span in got}
    assert set(spans) == {"agent.run", "openai.chat.completion", "agentlightning.annotation"}
    root, llm, reward = spans["agent.run"], spans["openai.chat.completion"], spans["agentlightning.annotation"]
    assert all(s.attempt_id == "at-01234567" for s in spans.values())
    assert llm.parent_id == root.span_id == reward.parent_id and llm.trace_id == root.trace_id
    assert llm.kind == "CLIENT" and llm.attributes["prompt_token_ids"] == [1, 2, 3]
    assert llm.events[0].name == "first_token" and llm.events[0].attributes == {"latency_ms": 12.5}
    assert reward.attributes["agentlightning.reward.0.value"] == 1.0 and reward.status.status_code == "OK"
    assert root.resource.attributes["service.name"] == "plain-agent"
    # Numbered as upstream's store numbers them: in the order they arrive (exporters send a span when
    # it ends, children before their parent), from 1. This used to be start order, which is not upstream's.
    in_order = [s.name for s in sorted(spans.values(), key=lambda s: s.sequence_id)]
    assert in_order == ["openai.chat.completion", "agentlightning.annotation", "agent.run"]
    assert sorted(s.sequence_id for s in spans.values()) == [1, 2, 3]


async def test_partial_success_reports_and_counts_spans_without_ids(topics: Settings, receiver: ServedApp) -> None:
    request = export_request([otlp_span("kept")], attempt_resource("ro-a", "at-a"))
    request.resource_spans.add().scope_spans.add().spans.extend([otlp_span("orphan-1"), otlp_span("orphan-2")])
    async with httpx.AsyncClient(base_url=receiver.url) as client:
        answer = await client.post("/v1/traces", content=request.SerializeToString(), headers=PB)
        metrics = (await client.get("/metrics")).text
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-protobuf"
    response = ExportTraceServiceResponse.FromString(answer.content)
    assert response.partial_success.rejected_spans == 2
    assert "agentlightning.rollout_id is missing" in response.partial_success.error_message
    assert 'agl_ingest_spans_rejected_total{reason="missing_rollout_id",server="otlp"}' in metrics
    got = await read_spans(topics, expected=1, settle=1.0)
    assert [span.name for _, span in got] == ["kept"]


async def test_bad_inputs_get_4xx_with_reasons_and_nothing_reaches_the_topic(topics: Settings, receiver: ServedApp) -> None:
    good = export_request([otlp_span("good")], attempt_resource("ro-g", "at-g")).SerializeToString()
    bomb = gzip.compress(b"\x00" * (1024 * 1024))  # ~1 KB on the wire, 1 MB inflated
    cases = [
        (b"\xff\x00garbage\x13", PB, 400, "invalid protobuf"),
        (b"{oops", {"Content-Type": "application/json"}, 400, "invalid JSON"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "not-hex"}]}]}]}',
         {"Content-Type": "application/json"}, 400, "not hex"),
        (good, {"Content-Type": "text/plain"}, 415, "unsupported Content-Type"),
        (good, {}, 415, "unsupported Content-Type"),
        (b"\x00" * (65 * 1024), PB, 413, "exceeds the limit"),
        (bomb, {**PB, "Content-Encoding": "gzip"}, 413, "decompressed body exceeds"),
        (b"not gzip at all", {**PB, "Content-Encoding": "gzip"}, 400, "invalid gzip"),
        (good, {**PB, "Content-Encoding": "br"}, 415, "unsupported Content-Encoding"),
    ]
    async with httpx.AsyncClient(base_url=receiver.url) as client:
        for body, headers, status, reason in cases:
            answer = await client.post("/v1/traces", content=body, headers=headers)
            assert answer.status_code == status, (reason, answer.text)
            if headers.get("Content-Type") == "application/x-protobuf":
                message = status_pb2.Status.FromString(answer.content).message
            else:
                message = answer.json()["message"]
            assert reason in message
        # The server keeps serving: health, then one good export that is the only record produced.
        assert (await client.get("/health")).json()["status"] == "ok"
        ok = await client.post("/v1/traces", content=gzip.compress(good), headers={**PB, "Content-Encoding": "gzip"})
        assert ok.status_code == 200
        assert not ExportTraceServiceResponse.FromString(ok.content).HasField("partial_success")
    got = await read_spans(topics, expected=1, settle=1.0)
    assert [(key, span.name) for key, span in got] == [("ro-g", "good")]


async def test_bearer_token_is_required_when_configured(topics: Settings) -> None:
    app = create_app(topics, IngestOptions(token="s3cret-token"))
    body = export_request([otlp_span("authed")], attempt_resource("ro-t", "at-t")).SerializeToString()
    with ServedApp(app) as served:
        async with httpx.AsyncClient(base_url=served.url) as client:
            missing = await client.post("/v1/traces", content=body, headers=PB)
            wrong = await client.post("/v1/traces", content=body, headers={**PB, "Authorization": "Bearer nope"})
            assert (missing.status_code, wrong.status_code) == (401, 401)
            assert "missing bearer token" in status_pb2.Status.FromString(missing.content).message
            assert (await client.get("/health")).status_code == 200
        done = subprocess.run(
            [sys.executable, str(PROGRAM), f"{served.url}/v1/traces", "ro-t", "at-t", "json", "s3cret-token"],
            capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 0, done.stderr
    got = await read_spans(topics, expected=3, settle=0.5)
    assert len(got) == 3 and {key for key, _ in got} == {"ro-t"}
