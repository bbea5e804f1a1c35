"""Hand-built OTLP export requests for tests (ids, attributes and resources chosen per case)."""

from __future__ import annotations

import os
from typing import Any, Optional

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1 import trace_pb2


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=key_values(value)))
    raise TypeError(type(value))


def key_values(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def otlp_span(
    name: str = "step",
    attributes: Optional[dict[str, Any]] = None,
    *,
    trace_id: Optional[bytes] = None,
    span_id: Optional[bytes] = None,
    parent_span_id: bytes = b"",
    start_ns: int = 1_700_000_000_000_000_000,
    end_ns: int = 1_700_000_000_500_000_000,
    status_code: int = 0,
) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace_id or os.urandom(16),
        span_id=span_id or os.urandom(8),
        parent_span_id=parent_span_id,
        name=name,
        kind=trace_pb2.Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        attributes=key_values(attributes or {}),
        status=trace_pb2.Status(code=status_code),
    )


def export_request(spans: list[trace_pb2.Span], resource: Optional[dict[str, Any]] = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend(key_values(resource or {}))
    ss = rs.scope_spans.add()
    ss.scope.name = "tests"
    ss.spans.extend(spans)
    return request


def attempt_resource(rollout_id: str, attempt_id: str, **extra: Any) -> dict[str, Any]:
    return {"agentlightning.rollout_id": rollout_id, "agentlightning.attempt_id": attempt_id, **extra}
