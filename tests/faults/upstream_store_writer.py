"""Writes through a store address with upstream's own client, and prints every write that was acknowledged.

Runs with the side venv's python (agentlightning 0.3.0, never a dependency of agl-stream):
``python upstream_store_writer.py URL --rollouts N --spans K --concurrency C --tag TAG``.

Each of C workers takes the next rollout number and, as an upstream runner would: ``start_rollout``,
K ``add_span`` (upstream ``Span`` objects made from real OpenTelemetry SDK spans, sequence ids 1..K),
one span through upstream's OTLP exporter aimed at ``/v1/traces``, then ``update_attempt(...,
status="succeeded")``. The client keeps its default retry schedule: a network error or 5xx is retried
after a ``/health`` probe, which is how a write interrupted by a dead replica reaches another one.

Output, one JSON object per line, flushed as it happens (so the test can act on progress, and an
acknowledgement is never lost with a crash of this script): ``{"ack": "rollout"|"span"|"succeeded",
...}`` for a write that got a success answer, ``{"error": ..., "op": ...}`` for one that failed after
the client's retries, and a last ``{"done": true, "retries": n, ...}``. ``retries`` counts the retries
the client and the exporter logged (a request that failed and was sent again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
from typing import Any

import agentlightning as agl
from agentlightning.utils.otlp import LightningStoreOTLPExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

_lock = threading.Lock()


def emit(**fields: Any) -> None:
    with _lock:
        print(json.dumps(fields), flush=True)


class RetryCounter(logging.Handler):
    """Counts the retries upstream's client and the OTLP exporter announce in their logs."""

    NEEDLES = ("will retry the request", "will be retried", "retrying in")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.retries = 0
        self.reasons: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(needle in message.lower() for needle in self.NEEDLES):
            self.retries += 1
            reason = message.split(" - ")[0][:80]
            self.reasons[reason] = self.reasons.get(reason, 0) + 1


def _otel_span(provider: TracerProvider, name: str, attributes: dict[str, Any]) -> ReadableSpan:
    span = provider.get_tracer("agl-stream-chaos-writer").start_span(name, attributes=attributes)
    span.end()
    assert isinstance(span, ReadableSpan)
    return span


def _export_otlp(url: str, rollout_id: str, attempt_id: str, span: ReadableSpan) -> bool:
    """One span through upstream's OTLP exporter (blocking, as the exporter is); True when accepted."""
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(url + "/v1/traces", rollout_id, attempt_id)
    try:
        return exporter.export([span]) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


async def write_one(store: agl.LightningStoreClient, provider: TracerProvider, args: argparse.Namespace,
                    i: int) -> None:  # fmt: skip
    try:
        task = await store.start_rollout(input={"tag": args.tag, "i": i}, metadata={"tag": args.tag})
    except Exception as exc:  # noqa: BLE001 - every failure is reported, the run goes on
        emit(error=repr(exc)[:300], op="start_rollout", i=i)
        return
    rid, aid = task.rollout_id, task.attempt.attempt_id
    emit(ack="rollout", rollout_id=rid, attempt_id=aid, i=i)
    for seq in range(1, args.spans + 1):
        otel = _otel_span(provider, f"step-{seq}", {"chaos.i": i, "chaos.seq": seq})
        span = agl.Span.from_opentelemetry(otel, rollout_id=rid, attempt_id=aid, sequence_id=seq)
        try:
            added = await store.add_span(span)
        except Exception as exc:  # noqa: BLE001
            emit(error=repr(exc)[:300], op="add_span", rollout_id=rid, span_id=span.span_id)
            continue
        emit(ack="span", via="add_span", rollout_id=rid, attempt_id=aid, span_id=span.span_id, added=added is not None)
    if args.otlp:
        otel = _otel_span(provider, "otlp-export", {"chaos.i": i})
        span_id = format(otel.get_span_context().span_id, "016x")
        try:
            ok = await asyncio.to_thread(_export_otlp, args.url, rid, aid, otel)
        except Exception as exc:  # noqa: BLE001
            ok, error = False, repr(exc)[:300]
        else:
            error = "exporter answered FAILURE"
        if ok:
            emit(ack="span", via="otlp", rollout_id=rid, attempt_id=aid, span_id=span_id, added=True)
        else:
            emit(error=error, op="otlp_export", rollout_id=rid, span_id=span_id)
    try:
        attempt = await store.update_attempt(rid, aid, status="succeeded")
    except Exception as exc:  # noqa: BLE001
        emit(error=repr(exc)[:300], op="update_attempt", rollout_id=rid, attempt_id=aid)
        return
    emit(ack="succeeded", rollout_id=rid, attempt_id=aid, answered_status=attempt.status)


async def main(args: argparse.Namespace) -> None:
    counter = RetryCounter()
    for name in ("agentlightning.store.client", "opentelemetry.exporter.otlp.proto.http.trace_exporter"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(counter)
    store = agl.LightningStoreClient(args.url)  # upstream's defaults: retry_delays (1, 2, 5), health probes
    provider = TracerProvider()
    numbers = iter(range(args.rollouts))

    async def worker() -> None:
        for i in numbers:  # shared iterator: each number goes to one worker
            await write_one(store, provider, args, i)

    try:
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    finally:
        await store.close()
    emit(done=True, retries=counter.retries, retry_reasons=counter.reasons)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument("--spans", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tag", default="chaos")
    parser.add_argument("--no-otlp", dest="otlp", action="store_false")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    asyncio.run(main(parser.parse_args()))
