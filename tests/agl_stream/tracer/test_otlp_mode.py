"""The OTLP/HTTP export mode speaks the standard wire format to a receiver (here a minimal local one)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agl_stream.config import Settings, SettingsError
from agl_stream.emitter import emit_message, emit_reward
from agl_stream.tracer import KafkaSpanSink, OtlpSpanSink, create_tracer


class _Receiver(BaseHTTPRequestHandler):
    requests: list[ExportTraceServiceRequest] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.headers["Content-Type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.requests = []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()


def _value(any_value: object) -> object:
    return getattr(any_value, any_value.WhichOneof("value"))  # type: ignore[attr-defined]


def test_otlp_mode_sends_lightning_ids(receiver: str) -> None:
    tracer = create_tracer(Settings.from_env(env={"AGL_SPAN_EXPORT": "otlp", "AGL_OTLP_ENDPOINT": receiver}))
    tracer.init()
    try:
        assert isinstance(tracer.pipeline.sink, OtlpSpanSink)
        with tracer.attempt_scope(rollout_id="ro-otlp", attempt_id="at-otlp"):
            emit_message("hello")
            emit_reward(0.5)
        tracer.pipeline.flush(timeout=30)
    finally:
        tracer.teardown()
    spans = []
    for request in _Receiver.requests:
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    spans.append((resource, span.name, {kv.key: _value(kv.value) for kv in span.attributes}))
    assert [(r["agentlightning.rollout_id"], r["agentlightning.attempt_id"]) for r, _, _ in spans] == [("ro-otlp", "at-otlp")] * 2
    assert [a["agentlightning.span_sequence_id"] for _, _, a in spans] == [1, 2]
    assert spans[1][2]["agentlightning.reward.0.value"] == 0.5


def test_export_mode_settings_are_validated() -> None:
    def tracer_from(env: dict[str, str]) -> object:
        return create_tracer(Settings.from_env(env=env))

    with pytest.raises(SettingsError, match="AGL_OTLP_ENDPOINT"):
        tracer_from({"AGL_SPAN_EXPORT": "otlp"})
    with pytest.raises(SettingsError, match="AGL_SPAN_EXPORT"):
        tracer_from({"AGL_SPAN_EXPORT": "carrier-pigeon"})
    with pytest.raises(SettingsError, match="AGL_SPAN_OVERFLOW"):
        tracer_from({"AGL_SPAN_OVERFLOW": "spill"})
    with pytest.raises(SettingsError, match="AGL_SPAN_BUFFER"):
        tracer_from({"AGL_SPAN_BUFFER": "0"})
    with pytest.raises(SettingsError, match="AGL_SPAN_BUFFER"):
        create_tracer(Settings.from_env(env={}), max_buffered=0)  # an argument is checked the same way
    tracer = tracer_from({"AGL_SPAN_BUFFER": "10", "AGL_SPAN_OVERFLOW": "drop"})
    assert (tracer.pipeline.max_buffered, tracer.pipeline.overflow) == (10, "drop")  # type: ignore[attr-defined]
    assert isinstance(tracer.pipeline._sink_factory(), KafkaSpanSink)  # type: ignore[attr-defined]
    assert create_tracer(Settings.from_env(env={"AGL_SPAN_OVERFLOW": "drop"}), overflow="block").pipeline.overflow == "block"
