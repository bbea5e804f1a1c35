"""Bad input, property-based: every record decoder and the sinks' row building give a clear error, never a crash.

Complements what other suites already cover (``tests/agl_stream/test_serialization.py``: random
bytes as a Span, random JSON data as a Trajectory; ``tests/ingest``: OTLP bodies over HTTP and the
decoders; ``tests/agl_stream/runner``: an undecodable task goes to the dead letters;
``tests/processors``: dead-lettering in the processors). Here, for *every* topic model:

* valid records truncated anywhere, or with bytes flipped -> :class:`RecordError` (or, rarely, a
  valid record of the same model: a truncation can still be valid JSON only if it is the whole);
* every field of a valid record replaced by a value of the wrong type, huge strings, deep nesting,
  unicode (including lone surrogates), unknown schema versions, another model's schema;
* the sinks' ClickHouse row building (``to_rows`` then Arrow) on whatever decodes: rows, or one of
  the errors the sink turns into a dead letter (no other exception, so no crashed sink and no
  partially written batch);
* the state machine's rules with ids that do not exist: no requeue, no state created by an event
  (a cancel is remembered as a cancelled tombstone, by design).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agl_stream import RecordError, decode, encode
from agl_stream.serialization import MODELS_BY_SCHEMA, SCHEMAS, SUPPORTED_VERSIONS, decode_any
from tests.agl_stream.samples import SAMPLES

MODELS = list(SCHEMAS)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) \
    | st.text(max_size=40)  # fmt: skip
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                           max_leaves=12)  # fmt: skip
nasty_text = st.sampled_from(["", "\x00", "\ud800", "\udfff\ud800", "😀" * 1000, "a" * 1_000_000, "\u202e\u0000\uffff",
                              "ro-' OR 1=1 --", "\n\r\t", "ñ" * 70_000])  # fmt: skip


def deep(n: int) -> Any:
    value: Any = "leaf"
    for i in range(n):
        value = {"k": value} if i % 2 else [value]
    return value


def envelope(schema: str, version: Any, data: Any) -> bytes:
    return json.dumps({"schema": schema, "v": version, "data": data}).encode()


def assert_clean(raw: bytes, model: type[BaseModel]) -> BaseModel | None:
    """decode() returns a model instance or raises RecordError with a reason; anything else fails."""
    try:
        value = decode(raw, model)
    except RecordError as err:
        assert err.reason and isinstance(err.reason, str)
        return None
    assert isinstance(value, model)
    return value


def sink_rows_or_rejected(value: BaseModel) -> None:
    """What a sink does with a decoded record: rows that convert to Arrow, or an error it dead-letters."""
    from agl_stream_processors.clickhouse.columns import ColumnBatch, RowError
    from agl_stream_processors.sinks.specs import SINKS

    specs = [s for s in SINKS.values() if s.model is type(value)]
    for spec in specs:
        try:
            rows = spec.to_rows(value, 1_700_000_000_000)
        except (RowError, ValueError, TypeError):
            continue  # -> dead letter "cannot convert to ... rows"
        batch = ColumnBatch(spec.schema)
        try:
            for row in rows:
                batch.check_row(row)
        except RowError:
            continue  # -> dead letter, the rest of the batch is written
        batch.rows.extend(rows)
        table = batch.to_arrow()  # checked rows must convert: a failure here would fail the whole batch
        assert table.num_rows == len(rows)


# ---------------------------------------------------------------- truncated and corrupted records


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@FAST
@given(data=st.data())
def test_truncated_records_are_rejected(model: type[BaseModel], data: st.DataObject) -> None:
    raw = encode(SAMPLES[model])
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    assert assert_clean(raw[:cut], model) is None, "a truncated record decoded"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@FAST
@given(data=st.data())
def test_corrupted_bytes_give_record_error_or_a_valid_record(model: type[BaseModel], data: st.DataObject) -> None:
    raw = bytearray(encode(SAMPLES[model]))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        raw[data.draw(st.integers(min_value=0, max_value=len(raw) - 1))] = data.draw(st.integers(min_value=0, max_value=255))
    value = assert_clean(bytes(raw), model)
    if value is not None:
        sink_rows_or_rejected(value)


# ---------------------------------------------------------------- wrong types, huge, deep, unicode


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@FAST
@given(data=st.data())
def test_any_field_with_any_value_gives_record_error_or_a_sinkable_record(model: type[BaseModel], data: st.DataObject) -> None:
    doc = SAMPLES[model].model_dump(mode="json")
    field = data.draw(st.sampled_from(sorted(doc)))
    doc[field] = data.draw(json_values | nasty_text | st.just(deep(50)))
    value = assert_clean(envelope(SCHEMAS[model], 1, doc), model)
    if value is not None:
        sink_rows_or_rejected(value)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@FAST
@given(text=nasty_text)
def test_nasty_strings_in_every_string_field(model: type[BaseModel], text: str) -> None:
    doc = SAMPLES[model].model_dump(mode="json")
    for key, value in doc.items():
        if isinstance(value, str):
            doc[key] = text
    value = assert_clean(envelope(SCHEMAS[model], 1, doc), model)
    if value is not None:
        sink_rows_or_rejected(value)


@pytest.mark.parametrize("depth", [100, 1_000, 20_000])
def test_deeply_nested_payloads_do_not_crash(depth: int) -> None:
    from agl_stream import Span

    doc = SAMPLES[Span].model_dump(mode="json")
    doc["attributes"] = {"deep": "PLACEHOLDER"}
    nested = "[" * depth + '{"k":"leaf"}' + "]" * depth  # built as text: json.dumps itself recurses
    raw = json.dumps({"schema": "span", "v": 1, "data": doc}).replace('"PLACEHOLDER"', nested).encode()
    value = assert_clean(raw, Span)
    if value is not None:
        sink_rows_or_rejected(value)


def test_lone_surrogates_and_nul_in_span_attributes_reach_rows_or_dead_letters() -> None:
    from agl_stream import Span

    doc = SAMPLES[Span].model_dump(mode="json")
    doc["attributes"] = {"\ud800key": "\udfff", "nul\x00": "a\x00b", "emoji": "😀", "big": "x" * 2_000_000}
    raw = json.dumps({"schema": "span", "v": 1, "data": doc}).encode()  # \ud800 travels as a JSON escape
    value = assert_clean(raw, Span)
    if value is not None:
        sink_rows_or_rejected(value)


# ---------------------------------------------------------------- envelope: versions and schemas


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@FAST
@given(version=st.integers(min_value=-(2**63), max_value=2**63) | st.floats() | st.text(max_size=5) | st.booleans() | st.none())
def test_unknown_schema_versions_are_rejected(model: type[BaseModel], version: Any) -> None:
    assume(not (isinstance(version, int) and not isinstance(version, bool) and version in SUPPORTED_VERSIONS))
    doc = SAMPLES[model].model_dump(mode="json")
    raw = json.dumps({"schema": SCHEMAS[model], "v": version, "data": doc}, allow_nan=True).encode()
    with pytest.raises(RecordError) as err:
        decode(raw, model)
    assert "version" in err.value.reason or "integer" in err.value.reason
    with pytest.raises(RecordError):
        decode_any(raw)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_record_of_another_schema_is_rejected_by_name(model: type[BaseModel]) -> None:
    for other in MODELS:
        if other is model:
            continue
        with pytest.raises(RecordError) as err:
            decode(encode(SAMPLES[other]), model)
        assert SCHEMAS[model] in err.value.reason and SCHEMAS[other] in err.value.reason


@FAST
@given(schema=st.text(max_size=30))
def test_unknown_schema_names_are_rejected(schema: str) -> None:
    assume(schema not in MODELS_BY_SCHEMA)
    with pytest.raises(RecordError) as err:
        decode_any(envelope(schema, 1, {}))
    assert "schema" in err.value.reason


# ---------------------------------------------------------------- runner task decoding


@FAST
@given(data=st.data())
def test_task_records_with_bad_attempts_are_rejected(data: st.DataObject) -> None:
    """What a runner decodes from agl.tasks: the attempt must be a valid attempt of the same kind of ids."""
    from agl_stream import AttemptedRollout

    doc = SAMPLES[AttemptedRollout].model_dump(mode="json")
    doc["attempt"] = data.draw(json_values | st.just(None) | st.just({}))
    value = assert_clean(envelope("task", 1, doc), AttemptedRollout)
    if value is not None:
        assert value.attempt is not None


# ---------------------------------------------------------------- ids that do not exist


@FAST
@given(rollout_id=st.text(min_size=1, max_size=40), attempt_id=st.text(min_size=1, max_size=40),
       kind=st.sampled_from(["started", "heartbeat", "finished"]), status=st.sampled_from(["succeeded", "failed", None]))  # fmt: skip
def test_events_for_unknown_rollouts_change_nothing(rollout_id: str, attempt_id: str, kind: str, status: Any) -> None:
    from agl_stream import AttemptEvent
    from agl_stream_processors.state_machine.rules import on_activity, on_attempt_event, on_cancel
    from agl_stream.types import RolloutControl

    try:
        event = AttemptEvent(kind=kind, rollout_id=rollout_id, attempt_id=attempt_id, status=status)
    except ValueError:
        return  # the model refuses the combination: it can never reach the rules
    outcome = on_attempt_event(None, event, 1_700_000_000.0)
    assert outcome.requeue is None
    if kind != "started":
        assert outcome.state is None, f"{kind} for an unknown rollout created state"
    assert on_activity(None, attempt_id, 1_700_000_000.0, is_span=False).state is None
    # a cancel for an unknown id is remembered as a cancelled tombstone (it may have overtaken its task)
    cancelled = on_cancel(None, RolloutControl(rollout_id=rollout_id), 1_700_000_000.0)
    assert cancelled.requeue is None and cancelled.state is not None and cancelled.state.rollout.status == "cancelled"
