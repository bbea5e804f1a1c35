"""The state machine reads only a span's ids: fast for agl-stream's encoding, correct for any other."""

from __future__ import annotations

import pytest

from agl_stream.serialization import RecordError, encode
from agl_stream.types import Span
from agl_stream_processors.state_machine.app import _span_ids


def test_ids_of_encoded_spans_and_of_other_field_orders() -> None:
    span = Span(rollout_id="ro-1", attempt_id="at-2", sequence_id=1, trace_id="t", span_id="s", name="n")
    assert _span_ids(encode(span)) == ("ro-1", "at-2")
    assert _span_ids(b'{"v":1,"schema":"span","data":{"name":"x","attempt_id":"a","rollout_id":"r"}}') == ("r", "a")
    escaped = b'{"schema":"span","v":1,"data":{"rollout_id":"r\\"1","attempt_id":"a"}}'
    assert _span_ids(escaped) == ('r"1', "a")  # escapes take the full-parse path


@pytest.mark.parametrize(
    "raw",
    [b"junk", None, b'{"schema":"worker","v":1,"data":{}}', b'{"schema":"span","v":1,"data":{"rollout_id":1}}'],
)
def test_unreadable_spans_raise(raw: bytes | None) -> None:
    with pytest.raises((RecordError, KeyError, TypeError)):
        _span_ids(raw)
