"""Spans: OpenTelemetry-compatible fields plus the rollout/attempt/sequence ids that order them."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.ids import generate_span_id, generate_trace_id
from agl_stream.semconv import AGL_VIRTUAL

StatusCode = Literal["UNSET", "OK", "ERROR"]
AttributeValue = Any  # str | bool | int | float | list of those (OTel); kept flat with dotted keys


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TraceStatus(_Model):
    status_code: StatusCode = "UNSET"
    description: Optional[str] = None


class SpanContext(_Model):
    trace_id: str
    span_id: str
    is_remote: bool = False
    trace_state: dict[str, str] = Field(default_factory=dict)


class Event(_Model):
    name: str
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    timestamp: Optional[float] = None


class Link(_Model):
    context: SpanContext
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)


class OtelResource(_Model):
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    schema_url: str = ""


class SpanCoreFields(_Model):
    """The parts of a span an emitter decides; ids and timing context are added when it is recorded."""

    name: str
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    status: TraceStatus = Field(default_factory=TraceStatus)
    start_time: Optional[float] = None
    end_time: Optional[float] = None


class Span(_Model):
    rollout_id: str
    attempt_id: str
    sequence_id: int = Field(ge=0, description="per-attempt monotonic order, independent of clocks")
    trace_id: str
    span_id: str
    parent_id: Optional[str] = None
    name: str
    status: TraceStatus = Field(default_factory=TraceStatus)
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    context: Optional[SpanContext] = None
    parent: Optional[SpanContext] = None
    resource: OtelResource = Field(default_factory=OtelResource)
    kind: str = "INTERNAL"

    @classmethod
    def from_attributes(
        cls,
        *,
        attributes: dict[str, AttributeValue],
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        sequence_id: Optional[int] = None,
        name: Optional[str] = None,
        trace_id: Optional[str] = None,
        span_id: Optional[str] = None,
        parent_id: Optional[str] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
        resource: Optional[OtelResource] = None,
        status: Optional[TraceStatus] = None,
    ) -> "Span":
        """A synthetic span carrying ``attributes`` (upstream's ``Span.from_attributes``): everything else
        is optional; missing ids are random, the name is ``agentlightning.virtual``, the status ``OK``,
        rollout/attempt ids are empty and the sequence id 0 until the caller gives them."""
        trace_id = trace_id or generate_trace_id()
        span_id = span_id or generate_span_id()
        return cls(
            rollout_id=rollout_id or "",
            attempt_id=attempt_id or "",
            sequence_id=sequence_id or 0,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=name or AGL_VIRTUAL,
            status=status or TraceStatus(status_code="OK"),
            attributes=attributes,
            start_time=start_time,
            end_time=end_time,
            context=SpanContext(trace_id=trace_id, span_id=span_id),
            parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
            resource=resource or OtelResource(),
        )

    @classmethod
    def from_core_fields(
        cls,
        core: SpanCoreFields,
        *,
        rollout_id: str,
        attempt_id: str,
        sequence_id: int,
        trace_id: Optional[str] = None,
        span_id: Optional[str] = None,
        parent_id: Optional[str] = None,
    ) -> "Span":
        trace_id = trace_id or generate_trace_id()
        span_id = span_id or generate_span_id()
        return cls(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=core.name,
            status=core.status,
            attributes=dict(core.attributes),
            start_time=core.start_time,
            end_time=core.end_time,
            context=SpanContext(trace_id=trace_id, span_id=span_id),
            parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
        )
