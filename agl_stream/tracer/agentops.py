"""Upstream's ``agentlightning.tracer.agentops`` path: ``AgentOpsTracer``, here the OpenTelemetry tracer
under upstream's default tracer name (no AgentOps SDK; see :mod:`agl_stream.tracer.compat`)."""

from __future__ import annotations

from agl_stream.tracer.compat import AgentOpsTracer

__all__ = ["AgentOpsTracer"]
