"""The golden corpus after a round trip: transport -> agl.spans -> ClickHouse -> spans -> adapters.

Every case of the corpus (see ``test_golden_parity.py``; regenerate with ``make golden``) travels
three ways, each case under a rollout id of its own:

* upstream-style through the real OTLP/HTTP receiver: the stock OpenTelemetry OTLP exporter (the
  one upstream's ``LightningStoreOTLPExporter`` extends) sends one request per span, in end order,
  without sequence ids except the ones the LLM proxy puts on its own spans;
* the same, spans shuffled;
* straight onto ``agl.spans`` as the SDK's exporter sends them, with sequence ids, in creation order.

The span sink writes them into ClickHouse (the real chdb engine), the replay reader reads them
back, and every span must be stored faithfully and every adapter must give upstream's answer.
"""

from __future__ import annotations

from typing import Optional

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agl_stream.config import Settings
from agl_stream.kafka import RecordProducer
from agl_stream.semconv import LightningResourceAttributes
from agl_stream.types import Span
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.otlp.app import create_app
from tests.agl_stream.adapter.golden.cases import GoldenCase, differences, golden_cases
from tests.ingest.helpers import ServedApp

pytestmark = pytest.mark.integration

ROUTES: tuple[tuple[str, str], ...] = (
    ("otlp", "end/no_sequence_ids"),
    ("otlp", "shuffled/no_sequence_ids"),
    ("topic", "creation/sequence_ids"),
)
_ROLLOUT = LightningResourceAttributes.ROLLOUT_ID.value
_ATTEMPT = LightningResourceAttributes.ATTEMPT_ID.value
_SEQUENCE = LightningResourceAttributes.SPAN_SEQUENCE_ID.value


def _ns(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else round(seconds * 1_000_000_000)


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def readable(span: Span, rollout_id: str, sequence_id: Optional[int]) -> ReadableSpan:
    """The span as upstream's tracer handed it to its OTLP exporter: ids in the resource, where
    upstream's exporter puts them (the sequence id only when the producer numbered the span)."""
    resource = {k: v for k, v in span.resource.attributes.items() if k != _SEQUENCE}
    resource.update({_ROLLOUT: rollout_id, _ATTEMPT: span.attempt_id})
    if sequence_id is not None:
        resource[_SEQUENCE] = sequence_id
    parent = None
    if span.parent_id:
        parent = _context(span.parent.trace_id if span.parent else span.trace_id, span.parent_id)
    return ReadableSpan(
        name=span.name,
        context=_context(span.trace_id, span.span_id),
        parent=parent,
        resource=Resource(resource),
        attributes=span.attributes,
        events=[Event(e.name, e.attributes, _ns(e.timestamp)) for e in span.events],
        kind=SpanKind.INTERNAL,
        status=Status(StatusCode[span.status.status_code], span.status.description),
        start_time=_ns(span.start_time),
        end_time=_ns(span.end_time),
    )


def _rollout_id(case_index: int, route_index: int) -> str:
    return f"ro-{0xC0DE0000 + case_index * len(ROUTES) + route_index:012x}"


def _assert_stored_faithfully(case: GoldenCase, stored: list[Span]) -> None:
    originals = {s.span_id: s for s in case.spans}
    assert sorted(originals) == sorted(s.span_id for s in stored), case.name
    for span in stored:
        original = originals[span.span_id]
        assert (span.name, span.trace_id, span.parent_id) == (original.name, original.trace_id, original.parent_id)
        assert span.attributes == original.attributes, (case.name, span.name)
        assert span.status.status_code == original.status.status_code
        for got, want in ((span.start_time, original.start_time), (span.end_time, original.end_time)):
            assert got is not None and want is not None and abs(got - want) < 1e-6, (case.name, span.name)


async def test_corpus_through_the_otlp_receiver_or_the_topic_then_clickhouse(topics: Settings) -> None:
    from agl_stream_processors.clickhouse import connect
    from agl_stream_processors.replay import read_spans
    from agl_stream_processors.sinks import run_sinks

    cases = golden_cases()
    plans = [(case, route, delivery, _rollout_id(i, j))
             for i, case in enumerate(cases) for j, (route, delivery) in enumerate(ROUTES)]  # fmt: skip
    with ServedApp(create_app(topics, IngestOptions())) as receiver:
        exporter = OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces", timeout=30)
        try:
            for case, route, delivery, rollout_id in plans:
                if route != "otlp":
                    continue
                spans = case.spans
                for index in case.order(delivery):
                    span = spans[index]
                    numbered = case.keeps_sequence_ids(delivery) or span.span_id in case.intrinsic
                    result = exporter.export([readable(span, rollout_id, span.sequence_id if numbered else None)])
                    assert result is SpanExportResult.SUCCESS, (case.name, span.name)
        finally:
            exporter.shutdown()
    async with RecordProducer(topics) as producer:
        for case, route, delivery, rollout_id in plans:
            if route == "topic":
                spans = [s.model_copy(update={"rollout_id": rollout_id}) for s in case.delivered(delivery)]
                await producer.send_many(topics.topic("spans"), [(rollout_id, s) for s in spans])

    await run_sinks(topics, ["spans"], idle_exit=3.0)  # drains agl.spans into ClickHouse, then stops
    ch = connect(topics.effective_clickhouse_dsn, create_database=True)
    try:
        stored = read_spans(ch, [(rollout_id, case.spans[0].attempt_id) for case, _, _, rollout_id in plans])
    finally:
        ch.close()

    problems = []
    for case, route, delivery, rollout_id in plans:
        spans = stored[(rollout_id, case.spans[0].attempt_id)]
        _assert_stored_faithfully(case, spans)
        found = differences(case, spans, delivery)
        if found:
            problems.append(f"{case.name} via {route} ({delivery}):\n" + "\n".join(found))
    assert not problems, "\n\n".join(problems)
