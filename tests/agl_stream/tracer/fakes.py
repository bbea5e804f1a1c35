"""An in-memory span sink (a fake for pure tracer/emitter logic; integration tests use the real broker)."""

from __future__ import annotations

import threading

from agl_stream.tracer import OtelTracer, SpanExportPipeline
from agl_stream.types import Span


class ListSink:
    name = "list"

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.spans: list[Span] = []
        self.spans_failed = 0
        self.spans_truncated = 0
        self.gate = gate

    async def start(self) -> None:
        return None

    async def write(self, spans: list[dict]) -> None:  # type: ignore[type-arg]
        if self.gate is not None:
            import asyncio

            while not self.gate.is_set():  # hold the exporter, as a stalled broker would
                await asyncio.sleep(0.01)
        self.spans.extend(Span.model_validate(doc) for doc in spans)  # the documents must be valid Span records

    async def flush(self) -> None:
        return None

    async def stop(self) -> None:
        return None


def list_tracer(**pipeline_options: object) -> tuple[OtelTracer, ListSink]:
    sink = ListSink()
    tracer = OtelTracer(SpanExportPipeline(lambda: sink, **pipeline_options))  # type: ignore[arg-type]
    tracer.init()
    return tracer, sink
