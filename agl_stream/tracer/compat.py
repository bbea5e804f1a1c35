"""Upstream tracer names that have no separate implementation here.

* :class:`AgentOpsTracer` is upstream's default tracer: it boots the AgentOps SDK locally to
  instrument LLM clients and frameworks. agl-stream's default tracer is the OpenTelemetry one, which
  instruments the OpenAI client itself (token ids included) and records every span any
  OpenTelemetry instrumentation creates, so ``AgentOpsTracer()`` is that tracer under upstream's
  name and constructor (AgentOps is not used or required).
* :class:`DummyTracer` records emitted spans in memory and exports nothing: with
  ``set_active_tracer(DummyTracer())`` code that calls the emitters runs outside a runner.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from agl_stream.tracer.base import Tracer
from agl_stream.tracer.exporter import AttemptCounters
from agl_stream.tracer.otel import OtelTracer
from agl_stream.types import SpanCoreFields

logger = logging.getLogger(__name__)


class AgentOpsTracer(OtelTracer):
    """Upstream's default tracer under its name: the OpenTelemetry tracer (see the module docstring)."""

    name = "agentops"

    def __init__(self, *, agentops_managed: bool = True, instrument_managed: bool = True, daemon: bool = True) -> None:
        super().__init__()
        self.agentops_managed = agentops_managed
        self.instrument_managed = instrument_managed
        self.daemon = daemon


class DummyTracer(Tracer):
    """Keeps emitted spans in :attr:`spans`; exports nothing."""

    name = "dummy"

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[Any] = []

    def create_span(self, core: SpanCoreFields) -> None:
        self.spans.append(core)

    def add_spans(self, spans: Sequence[Any]) -> int:
        self.spans.extend(spans)
        return len(spans)

    async def flush_attempt(self, state: AttemptCounters, timeout: Optional[float] = None) -> None:
        return None
