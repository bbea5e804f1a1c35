"""Record envelope: every topic value is ``{"schema": NAME, "v": VERSION, "data": {...}}`` in JSON.

JSON keeps records readable with any Kafka tool and SQL engine; pydantic-core does the (de)serialization
in Rust, so it stays fast. The schema name and version travel *inside* the value (not only in headers)
so a record copied to a dead-letter table or a file still says what it is.

Anything that is not a valid envelope of the expected schema and a supported version raises
:class:`RecordError`, which carries the reason and the original bytes: consumers turn it into a dead
letter and go on.
"""

from __future__ import annotations

from typing import Any, Optional, TypeVar

import pydantic_core
from pydantic import BaseModel, ValidationError

from agl_stream.types import (
    AttemptedRollout,
    AttemptEvent,
    DatasetLine,
    DeadLetter,
    ResourcesUpdate,
    RolloutControl,
    RolloutSnapshot,
    Span,
    TrainingRun,
    TrainingStep,
    Trajectory,
    Worker,
)

SCHEMA_VERSION = 1
SUPPORTED_VERSIONS: frozenset[int] = frozenset({1})

M = TypeVar("M", bound=BaseModel)

#: schema name of every model that travels on a topic
SCHEMAS: dict[type[BaseModel], str] = {
    AttemptedRollout: "task",
    AttemptEvent: "attempt_event",
    RolloutSnapshot: "rollout",
    RolloutControl: "rollout_control",
    Span: "span",
    ResourcesUpdate: "resources_update",
    Trajectory: "trajectory",
    Worker: "worker",
    DeadLetter: "dead_letter",
    TrainingStep: "training_step",
    TrainingRun: "training_run",
    DatasetLine: "dataset_line",
}
MODELS_BY_SCHEMA: dict[str, type[BaseModel]] = {name: model for model, name in SCHEMAS.items()}


class RecordError(ValueError):
    """A record's bytes could not be turned into the expected model."""

    def __init__(self, reason: str, raw: Optional[bytes] = None, schema: Optional[str] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw
        self.schema = schema


def schema_name(model: type[BaseModel]) -> str:
    try:
        return SCHEMAS[model]
    except KeyError:
        raise TypeError(f"{model.__name__} is not a topic record model; known: {sorted(SCHEMAS.values())}") from None


_PREFIXES: dict[type[BaseModel], bytes] = {
    model: b'{"schema":"' + name.encode() + b'","v":' + str(SCHEMA_VERSION).encode() + b',"data":'
    for model, name in SCHEMAS.items()
}


def encode(record: BaseModel) -> bytes:
    """Serialize a topic record model into its envelope bytes."""
    prefix = _PREFIXES.get(type(record))
    if prefix is None:
        raise TypeError(f"{type(record).__name__} is not a topic record model")
    return prefix + record.__pydantic_serializer__.to_json(record) + b"}"


def decode_envelope(raw: Optional[bytes]) -> tuple[str, int, Any]:
    """Parse the envelope; returns (schema, version, data) or raises :class:`RecordError`."""
    if raw is None:
        raise RecordError("record has no value (tombstone or empty)", raw)
    try:
        doc = pydantic_core.from_json(raw)
    except ValueError as exc:
        raise RecordError(f"value is not valid JSON: {exc}", raw) from None
    if not isinstance(doc, dict) or "schema" not in doc or "v" not in doc or "data" not in doc:
        raise RecordError("value is not an agl-stream envelope (needs keys schema, v, data)", raw)
    schema, version = doc["schema"], doc["v"]
    if not isinstance(schema, str) or not isinstance(version, int) or isinstance(version, bool):
        raise RecordError("envelope 'schema' must be a string and 'v' an integer", raw)
    if version not in SUPPORTED_VERSIONS:
        raise RecordError(
            f"unsupported schema version {version} for {schema!r} (supported: {sorted(SUPPORTED_VERSIONS)})",
            raw,
            schema,
        )
    return schema, version, doc["data"]


def decode(raw: Optional[bytes], model: type[M]) -> M:
    """Deserialize envelope bytes into ``model``, raising :class:`RecordError` with the reason."""
    expected = schema_name(model)
    prefix = _PREFIXES[model]
    if raw is not None and raw.startswith(prefix) and raw.endswith(b"}"):
        # Fast path for what our own producers write: validate the data part straight from JSON
        # (about twice as fast as parsing to Python objects first).
        try:
            return model.model_validate_json(raw[len(prefix) : -1])
        except ValidationError as exc:
            if any(e["type"] != "json_invalid" for e in exc.errors(include_url=False)):
                raise RecordError(f"invalid {expected} record: {_summarize(exc)}", raw, expected) from None
            # not valid JSON as sliced (e.g. trailing bytes): fall through to the general path
    schema, _version, data = decode_envelope(raw)
    if schema != expected:
        raise RecordError(f"expected schema {expected!r}, got {schema!r}", raw, schema)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"invalid {expected} record: {_summarize(exc)}", raw, schema) from None


def decode_any(raw: Optional[bytes]) -> BaseModel:
    """Deserialize a record of any known schema (for tools that read mixed streams, like the DLQ viewer)."""
    schema, _version, data = decode_envelope(raw)
    model = MODELS_BY_SCHEMA.get(schema)
    if model is None:
        raise RecordError(f"unknown schema {schema!r}", raw, schema)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"invalid {schema} record: {_summarize(exc)}", raw, schema) from None


def _summarize(exc: ValidationError, limit: int = 3) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in errors[:limit]]
    more = f" (+{len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more
