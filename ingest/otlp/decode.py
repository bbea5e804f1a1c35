"""OTLP ``ExportTraceServiceRequest`` (protobuf or JSON) -> agl :class:`~agl_stream.types.Span` records.

The rollout, attempt and sequence id of a span come from its own attributes or, failing that, its
resource attributes, under upstream's ``agentlightning.*`` keys, so upstream tracers and any
OpenTelemetry SDK export here unchanged; spans without a sequence id are numbered as upstream's
store numbers them (see :func:`to_spans`). A span that names no rollout or attempt (or has
malformed ids) is not guessed at: it is returned as a :class:`Rejection` with a reason, which the
server reports back as OTLP partial success. A body that is not an export request at all raises
:class:`OtlpDecodeError`.
"""

from __future__ import annotations

import base64
import json
import math
from operator import attrgetter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from google.protobuf import json_format, unknown_fields
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from agl_stream.semconv import LightningResourceAttributes
from agl_stream.types import Span
from agl_stream_ingest.sequence import SequenceAllocator

ROLLOUT_KEY = LightningResourceAttributes.ROLLOUT_ID.value
ATTEMPT_KEY = LightningResourceAttributes.ATTEMPT_ID.value
SEQUENCE_KEY = LightningResourceAttributes.SPAN_SEQUENCE_ID.value

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
_KIND = {0: "INTERNAL", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_PARENT_IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_ID_FIELDS = {"traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"}


class OtlpDecodeError(ValueError):
    """The body is not a valid OTLP trace export request; the message says why."""


@dataclass(frozen=True)
class Rejection:
    """One span that was refused, with a short reason code (a metric label) and the full reason."""

    span_id: str
    name: str
    code: str
    reason: str


@dataclass
class DecodedExport:
    spans: list[Span] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


# ------------------------------------------------------------------ body parsing


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    """Binary protobuf body -> request; bytes that parse only as unknown fields are refused too."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise OtlpDecodeError(f"invalid protobuf ExportTraceServiceRequest: {exc}") from None
    if len(unknown_fields.UnknownFieldSet(request)):
        raise OtlpDecodeError("invalid protobuf ExportTraceServiceRequest: body has fields the schema does not define")
    return request


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON body -> request. OTLP/JSON spells ids as hex (not proto3-JSON base64), fixed here."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise OtlpDecodeError(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OtlpDecodeError(f"invalid OTLP/JSON: expected an object, got {type(doc).__name__}")
    _hex_ids_to_base64(doc)
    request = ExportTraceServiceRequest()
    try:
        # The OTLP spec asks receivers to ignore unknown JSON fields (forward compatibility).
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as exc:
        raise OtlpDecodeError(f"invalid OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    return request


def _hex_ids_to_base64(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = _hex_to_base64(key, value)
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def _hex_to_base64(key: str, value: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        raise OtlpDecodeError(f"invalid OTLP/JSON: {key} {value[:64]!r} is not hex") from None


# ------------------------------------------------------------------ values


def any_value(value: AnyValue) -> Any:
    """OTLP AnyValue -> JSON-compatible Python value (kvlists become dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """Flat dotted attributes as agl spans keep them: nested kvlists become ``a.b`` keys."""
    flat: dict[str, Any] = {}
    for kv in pairs:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "string_value" or kind == "int_value" or kind == "bool_value":  # the common case, kept cheap
            flat[kv.key] = getattr(value, kind)
        elif kind == "array_value":
            flat[kv.key] = _array(value.array_value.values)
        elif kind is not None:
            _put(flat, kv.key, any_value(value))
    return flat


def _array(values: Any) -> Any:
    """OTel attribute arrays hold primitives only; anything nested is kept as its JSON text."""
    kinds = {item.WhichOneof("value") for item in values}
    if len(kinds) == 1 and kinds & {"int_value", "string_value", "bool_value"}:  # token ids, tags: the hot case
        return list(map(attrgetter(kinds.pop()), values))
    if kinds & {"array_value", "kvlist_value"}:
        return json.dumps([any_value(v) for v in values])
    return [_finite(any_value(v)) for v in values]


def _put(flat: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        return  # OTel SDKs never send empty values; there is nothing to keep
    if isinstance(value, dict):
        for sub, inner in value.items():
            _put(flat, f"{key}.{sub}", inner)
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        flat[key] = json.dumps(value)
    elif isinstance(value, list):
        flat[key] = [_finite(v) for v in value]
    else:
        flat[key] = _finite(value)


def _finite(value: Any) -> Any:
    """inf/nan as text: records are JSON, where they would otherwise turn into null."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _trace_state(raw: str) -> dict[str, str]:
    state: dict[str, str] = {}
    for member in raw.split(","):
        key, sep, value = member.strip().partition("=")
        if sep and key:
            state[key] = value
    return state


def _seconds(nanos: int) -> Optional[float]:
    return nanos / 1e9 if nanos else None


def _valid_id(raw: bytes, size: int) -> bool:
    return len(raw) == size and raw != bytes(size)


# ------------------------------------------------------------------ spans


def _ids(span_attrs: dict[str, Any], resource_attrs: dict[str, Any]) -> tuple[Any, Any, Any]:
    def pick(key: str) -> Any:
        return span_attrs[key] if key in span_attrs else resource_attrs.get(key)

    return pick(ROLLOUT_KEY), pick(ATTEMPT_KEY), pick(SEQUENCE_KEY)


def _sequence(raw: Any) -> Optional[int]:
    """A supplied sequence id as int; raises ValueError when it is not a non-negative integer."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        raise ValueError(f"{SEQUENCE_KEY} must be a non-negative integer, got {raw!r}")
    if isinstance(raw, int) or (isinstance(raw, str) and raw.strip().isdigit()):
        value = int(raw)
        if value >= 0:
            return value
    if isinstance(raw, float) and raw.is_integer() and raw >= 0:
        return int(raw)
    raise ValueError(f"{SEQUENCE_KEY} must be a non-negative integer, got {raw!r}")


def _reject(span: trace_pb2.Span, code: str, reason: str) -> Rejection:
    return Rejection(span_id=span.span_id.hex(), name=span.name, code=code, reason=reason)


def to_spans(request: ExportTraceServiceRequest, allocator: SequenceAllocator) -> DecodedExport:
    """Convert every span of the request, collecting the ones that cannot be attributed.

    Sequence ids follow upstream's store (``spans_from_proto`` + ``add_many_spans``): a supplied id
    (span attribute over resource attribute) is kept; spans without one get the rollout's next ids
    in the order they appear in the body, issued *before* this request's supplied ids move the
    counter up (upstream issues them in bulk first and syncs when it stores the spans).
    """
    out = DecodedExport()
    kept: list[dict[str, Any]] = []
    for resource_spans in request.resource_spans:
        resource_attrs = attributes(resource_spans.resource.attributes)
        schema_url = resource_spans.schema_url
        for scope_spans in resource_spans.scope_spans:
            scope_attrs: dict[str, Any] = {}
            if scope_spans.scope.name:
                scope_attrs["otel.scope.name"] = scope_spans.scope.name
            if scope_spans.scope.version:
                scope_attrs["otel.scope.version"] = scope_spans.scope.version
            for span in scope_spans.spans:
                fields = _span_fields(span, resource_attrs, scope_attrs, schema_url or scope_spans.schema_url, out)
                if fields is not None:
                    kept.append(fields)
    supplied = [f for f in kept if f["sequence_id"] is not None]
    for fields in kept:
        if fields["sequence_id"] is None:
            fields["sequence_id"] = allocator.next(fields["rollout_id"], fields["attempt_id"])
    for fields in supplied:
        allocator.observe(fields["rollout_id"], fields["attempt_id"], fields["sequence_id"])
    out.spans = [_build(fields) for fields in kept]
    return out


def _span_fields(
    span: trace_pb2.Span,
    resource_attrs: dict[str, Any],
    scope_attrs: dict[str, Any],
    schema_url: str,
    out: DecodedExport,
) -> Optional[dict[str, Any]]:
    if not _valid_id(span.trace_id, 16):
        out.rejected.append(_reject(span, "invalid_trace_id", f"span {span.name!r}: trace_id must be 16 non-zero bytes"))
        return None
    if not _valid_id(span.span_id, 8):
        out.rejected.append(_reject(span, "invalid_span_id", f"span {span.name!r}: span_id must be 8 non-zero bytes"))
        return None
    if span.parent_span_id and not _valid_id(span.parent_span_id, 8):
        out.rejected.append(
            _reject(span, "invalid_parent_id", f"span {span.name!r}: parent_span_id must be empty or 8 non-zero bytes")
        )
        return None
    span_attrs = attributes(span.attributes)
    rollout_id, attempt_id, raw_sequence = _ids(span_attrs, resource_attrs)
    for key, value in ((ROLLOUT_KEY, rollout_id), (ATTEMPT_KEY, attempt_id)):
        if not isinstance(value, str) or not value.strip():
            code = "missing_rollout_id" if key == ROLLOUT_KEY else "missing_attempt_id"
            what = "missing" if value is None else f"not a non-empty string ({value!r})"
            out.rejected.append(
                _reject(span, code, f"span {span.name!r} ({span.span_id.hex()}): {key} is {what} in span and resource attributes")
            )
            return None
    try:
        sequence_id = _sequence(raw_sequence)
    except ValueError as exc:
        out.rejected.append(_reject(span, "invalid_sequence_id", f"span {span.name!r} ({span.span_id.hex()}): {exc}"))
        return None
    return {
        "span": span,
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": sequence_id,
        "attributes": {**scope_attrs, **span_attrs},
        "resource_attrs": resource_attrs,
        "schema_url": schema_url,
    }


def _build(fields: dict[str, Any]) -> Span:
    """The record, validated in one pass (one pydantic-core call for the span and its parts)."""
    span: trace_pb2.Span = fields["span"]
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    parent_id = span.parent_span_id.hex() if span.parent_span_id else None
    resource = dict(fields["resource_attrs"])
    resource[ROLLOUT_KEY] = fields["rollout_id"]
    resource[ATTEMPT_KEY] = fields["attempt_id"]
    resource[SEQUENCE_KEY] = fields["sequence_id"]
    return Span.model_validate({
        "rollout_id": fields["rollout_id"],
        "attempt_id": fields["attempt_id"],
        "sequence_id": fields["sequence_id"],
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": parent_id,
        "name": span.name,
        "status": {"status_code": _STATUS.get(span.status.code, "UNSET"), "description": span.status.message or None},
        "attributes": fields["attributes"],
        "events": [
            {"name": e.name, "attributes": attributes(e.attributes), "timestamp": _seconds(e.time_unix_nano)}
            for e in span.events
        ],
        "links": [
            {
                "context": {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                            "trace_state": _trace_state(link.trace_state)},
                "attributes": attributes(link.attributes),
            }
            for link in span.links
        ],
        "start_time": _seconds(span.start_time_unix_nano),
        "end_time": _seconds(span.end_time_unix_nano),
        "context": {"trace_id": trace_id, "span_id": span_id, "trace_state": _trace_state(span.trace_state)},
        "parent": {"trace_id": trace_id, "span_id": parent_id, "is_remote": bool(span.flags & _PARENT_IS_REMOTE)}
        if parent_id
        else None,
        "resource": {"attributes": resource, "schema_url": fields["schema_url"]},
        "kind": _KIND.get(span.kind, "INTERNAL"),
    })
