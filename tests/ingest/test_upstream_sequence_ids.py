"""Spans exported by upstream Agent Lightning 0.3.0 keep upstream's ``sequence_id`` through the OTLP
receiver into ClickHouse.

The bodies and the answers are recorded with upstream's own code (``sequence_ids.json`` beside the
golden corpus; regenerate with ``python3 -m tests.agl_stream.adapter.golden.generate_sequence_ids``):
upstream's ``OtelTracer`` and ``AgentOpsTracer`` exporting natively to upstream's store server
(``native``: no sequence ids on the spans, so the store numbers them), and the spans upstream stored
re-exported with their ids in span attributes, in the resource, in both, as strings, or on every
other span only (``replay``), each as protobuf and OTLP/JSON, one request per span or batch
(``many``) and everything in one gzip request of several rollouts (``one``). ``expected`` is what
upstream's ``InMemoryLightningStore`` kept for exactly those requests. Users sort an attempt's spans
by ``sequence_id``, so every span must be stored with upstream's number.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agl_stream.client.sql_ids import in_lists
from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.otlp.app import create_app
from tests.ingest.helpers import ServedApp, read_spans
from tests.upstream_venv import run_upstream

GOLDEN = Path(__file__).resolve().parents[1] / "agl_stream" / "adapter" / "golden"
DATA_PATH = GOLDEN / "sequence_ids.json"
DATA: dict[str, Any] = json.loads(DATA_PATH.read_text())
DELIVERIES: dict[str, dict[str, Any]] = {d["name"]: d for d in DATA["deliveries"]}
Key = tuple[str, str, str]


def _expected(delivery: dict[str, Any]) -> dict[Key, int]:
    return {(r, a, s): q for r, a, s, q in delivery["expected"]}


def _differences(got: dict[Key, int], expected: dict[Key, int]) -> list[str]:
    out = [f"{key}: stored {got.get(key)}, upstream {value}" for key, value in expected.items()
           if got.get(key) != value]  # fmt: skip
    return out + [f"{key}: stored {value}, upstream has no such span" for key, value in got.items()
                  if key not in expected]  # fmt: skip


def test_the_recording_covers_every_delivery_and_placement() -> None:
    assert sorted(DELIVERIES) == sorted(
        f"{s}/{e}/{n}" for s in ("native", "replay") for e in ("protobuf", "json") for n in ("many", "one")
    )
    for name, delivery in DELIVERIES.items():
        rollouts = {r for r, *_ in delivery["expected"]}
        assert len(rollouts) >= 4, name  # several rollouts (in one request for '/one')
        assert any(len({a for r2, a, *_ in delivery["expected"] if r2 == r}) == 2 for r in rollouts), name  # a retry
        assert (len(delivery["bodies"]) == 1) == name.endswith("/one"), name
        if name.endswith("/one"):
            assert delivery["bodies"][0]["content_encoding"] == "gzip", name
    placements = set(DELIVERIES["replay/json/one"]["placements"].values())
    assert placements == {
        "span_attribute", "resource", "span_over_resource", "span_attribute_string", "every_other_span"
    }  # fmt: skip
    # Upstream numbers unnumbered spans from 1, per rollout: a retried attempt continues its rollout's count.
    native = DELIVERIES["native/protobuf/many"]["expected"]
    for rollout in {r for r, *_ in native}:
        by_attempt: dict[str, list[int]] = {}
        for r, a, _span, q in native:
            if r == rollout:
                by_attempt.setdefault(a, []).append(q)
        runs = sorted(by_attempt.values(), key=min)
        assert sorted(q for run in runs for q in run) == list(range(1, 1 + sum(map(len, runs))))
        assert all(max(before) < min(after) for before, after in zip(runs, runs[1:]))


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(DELIVERIES), ids=lambda n: n.replace("/", "-"))
async def test_upstream_exported_spans_are_stored_with_upstreams_sequence_ids(topics: Settings, name: str) -> None:
    from agl_stream_processors.clickhouse import connect
    from agl_stream_processors.sinks import run_sinks

    delivery = DELIVERIES[name]
    expected = _expected(delivery)
    with ServedApp(create_app(topics, IngestOptions())) as receiver:
        async with httpx.AsyncClient(base_url=receiver.url, timeout=30) as client:
            for sent in delivery["bodies"]:
                headers = {"Content-Type": sent["content_type"]}
                if sent["content_encoding"]:
                    headers["Content-Encoding"] = sent["content_encoding"]
                answer = await client.post("/v1/traces", content=base64.b64decode(sent["body"]), headers=headers)
                assert answer.status_code == 200, answer.text
                response = ExportTraceServiceResponse()
                if sent["content_type"] == "application/json":
                    json_format.Parse(answer.content, response)
                else:
                    response.ParseFromString(answer.content)
                assert response.partial_success.rejected_spans == 0, response.partial_success.error_message

    arrived = await read_spans(topics, len(expected))
    on_topic = {(s.rollout_id, s.attempt_id, s.span_id): s.sequence_id for _, s in arrived}
    assert not _differences(on_topic, expected), _differences(on_topic, expected)[:10]

    await run_sinks(topics, ["spans"], idle_exit=3.0)  # drains agl.spans into ClickHouse, then stops
    ch = connect(topics.effective_clickhouse_dsn, create_database=True)
    try:
        rows = [row for in_ids in in_lists(sorted({r for r, _, _ in expected})) for row in ch.query_rows(
            f"SELECT RolloutId, AttemptId, SpanId, SequenceId FROM spans FINAL WHERE RolloutId IN {in_ids}")[1]]  # fmt: skip
    finally:
        ch.close()
    stored = {(r, a, s): int(q) for r, a, s, q in rows}
    assert len(rows) == len(stored)
    assert not _differences(stored, expected), _differences(stored, expected)[:10]


@pytest.mark.slow
def test_the_recorded_answers_are_what_upstream_stores_today() -> None:
    """Upstream's store server, fed the committed bodies again, keeps the committed ids (skips without
    the side venv: the committed data is enough for the tests above)."""
    done = run_upstream([str(GOLDEN / "record_sequence_ids.py"), "check", "--data", str(DATA_PATH)], timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
