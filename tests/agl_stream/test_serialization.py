"""The record envelope: round trips, and one clear error type for anything malformed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_stream import RecordError, decode, encode
from agl_stream.serialization import SCHEMAS, decode_any
from tests.agl_stream.samples import SAMPLES


@pytest.mark.parametrize("model", list(SCHEMAS), ids=lambda m: m.__name__)
def test_every_topic_model_round_trips(model: type) -> None:
    record = SAMPLES[model]
    raw = encode(record)
    assert decode(raw, model) == record
    assert decode_any(raw) == record


def test_envelope_carries_schema_and_version() -> None:
    import json

    doc = json.loads(encode(next(iter(SAMPLES.values()))))
    assert set(doc) == {"schema", "v", "data"} and doc["v"] == 1


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "no value"),
        (b"\x00\xff garbage", "not valid JSON"),
        (b"[1,2]", "not an agl-stream envelope"),
        (b'{"schema":"span","v":99,"data":{}}', "unsupported schema version 99"),
        (b'{"schema":"span","v":"1","data":{}}', "'v' an integer"),
        (b'{"schema":"task","v":1,"data":{}}', "expected schema 'span'"),
        (b'{"schema":"span","v":1,"data":{"name":"x"}}', "invalid span record"),
    ],
)
def test_malformed_records_raise_record_error_with_reason(raw: bytes | None, reason: str) -> None:
    from agl_stream import Span

    with pytest.raises(RecordError, match=reason) as info:
        decode(raw, Span)
    assert info.value.raw == raw


def test_unknown_schema_in_decode_any() -> None:
    with pytest.raises(RecordError, match="unknown schema 'nope'"):
        decode_any(b'{"schema":"nope","v":1,"data":{}}')


def test_encode_rejects_non_record_models() -> None:
    from agl_stream import RolloutConfig

    with pytest.raises(TypeError):
        encode(RolloutConfig())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_never_escape_as_other_errors(raw: bytes) -> None:
    from agl_stream import Span

    try:
        decode(raw, Span)
    except RecordError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=20))
def test_arbitrary_json_data_gives_record_error(data: object) -> None:
    import json

    from agl_stream import Trajectory

    raw = json.dumps({"schema": "trajectory", "v": 1, "data": data}).encode()
    try:
        decode(raw, Trajectory)
    except RecordError as err:
        assert err.reason
