"""A plain OpenTelemetry program (no agl imports): what a non-agl agent would run.

usage: python otel_program.py ENDPOINT ROLLOUT_ID ATTEMPT_ID {protobuf|json} [TOKEN]

protobuf: the stock OTLP/HTTP exporter (opentelemetry-exporter-otlp-proto-http), gzip on.
json: the same spans encoded with the SDK's OTLP encoder and posted as OTLP/JSON.
Prints the number of spans it exported.
"""

from __future__ import annotations

import json
import sys
import urllib.request

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode


def run_agent(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("plain-agent", "1.0")
    with tracer.start_as_current_span("agent.run", kind=SpanKind.INTERNAL) as root:
        root.set_attribute("task.question", "2+2?")
        with tracer.start_as_current_span("openai.chat.completion", kind=SpanKind.CLIENT) as llm:
            llm.set_attribute("gen_ai.system", "openai")
            llm.set_attribute("prompt_token_ids", [1, 2, 3])
            llm.set_attribute("response_token_ids", [4, 5])
            llm.add_event("first_token", {"latency_ms": 12.5})
        with tracer.start_as_current_span("agentlightning.annotation") as reward:
            reward.set_attribute("agentlightning.reward.0.name", "primary")
            reward.set_attribute("agentlightning.reward.0.value", 1.0)
            reward.set_status(Status(StatusCode.OK))


def hexify(node):  # OTLP/JSON spells ids as hex, proto3-JSON as base64
    import base64

    if isinstance(node, dict):
        return {
            k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hexify(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [hexify(v) for v in node]
    return node


def main() -> int:
    endpoint, rollout_id, attempt_id, encoding = sys.argv[1:5]
    token = sys.argv[5] if len(sys.argv) > 5 else None
    resource = Resource.create(
        {"service.name": "plain-agent", "agentlightning.rollout_id": rollout_id, "agentlightning.attempt_id": attempt_id}
    )
    headers = {"Authorization": f"Bearer {token}"} if token else None
    provider = TracerProvider(resource=resource)
    if encoding == "protobuf":
        exporter = OTLPSpanExporter(endpoint=endpoint, compression=Compression.Gzip, headers=headers)
        results: list[SpanExportResult] = []
        original = exporter.export

        def export(spans):  # type: ignore[no-untyped-def]
            result = original(spans)
            results.append(result)
            return result

        exporter.export = export  # type: ignore[method-assign]
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        run_agent(provider)
        provider.shutdown()
        if any(r is not SpanExportResult.SUCCESS for r in results):
            print(f"export failed: {results}", file=sys.stderr)
            return 1
        print(len(results))
        return 0
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_agent(provider)
    spans = memory.get_finished_spans()
    body = json.dumps(hexify(json_format.MessageToDict(encode_spans(spans)))).encode()
    request = urllib.request.Request(endpoint, data=body, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    if answer.get("partialSuccess", {}).get("rejectedSpans"):
        print(f"rejected: {answer}", file=sys.stderr)
        return 1
    print(len(spans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
