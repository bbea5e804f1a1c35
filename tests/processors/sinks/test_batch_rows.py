"""Turning a batch into columns: a record whose values do not fit becomes a dead letter, the rest are kept."""

from __future__ import annotations

import pytest
from aiokafka.structs import ConsumerRecord

from agl_stream.config import Settings
from agl_stream.serialization import encode
from agl_stream.types import Trajectory, Triplet
from agl_stream_processors.clickhouse.columns import RowError, float_list, uint32_list
from agl_stream_processors.sinks.sink import Sink, _Batch
from agl_stream_processors.sinks.specs import SINKS
from tests.processors.clickhouse.store import make_trajectory


def _record(offset: int, value: bytes = b"{}") -> ConsumerRecord:
    return ConsumerRecord("agl.triplets", 0, offset, 1_700_000_000_000, 0, b"k", value, None, 1, 2, [])


def _sink() -> Sink:
    settings = Settings.from_env(env={}, kafka_bootstrap="127.0.0.1:9")
    return Sink(SINKS["triplets"], settings, ch=None, dlq=None)  # type: ignore[arg-type]  # no I/O in _rows


def test_unconvertible_records_are_isolated_and_the_rest_kept() -> None:
    good = make_trajectory("ro-000000000001", n=2)
    bad_tokens = make_trajectory("ro-000000000002", n=1)
    bad_tokens.triplets[0].prompt["token_ids"] = [1, -3]  # caught while building rows
    bad_logprobs = Trajectory(
        rollout_id="ro-000000000003", attempt_id="at-00000001",
        triplets=[Triplet(prompt={"token_ids": [1]}, response={"token_ids": [2], "logprobs": ["high"]})],
    )  # fmt: skip  # caught only when pyarrow builds the column
    batch = _Batch()
    for offset, value in enumerate([good, bad_tokens, bad_logprobs]):
        batch.records.append(_record(offset, encode(value)))
    batch.records.append(_record(3, b"not a trajectory"))  # caught when decoding
    table, bad = _sink()._rows(batch)
    assert table.column("RolloutId").to_pylist() == ["ro-000000000001", "ro-000000000001"]
    reasons = {record.offset: reason for reason, _kind, record in bad}
    assert set(reasons) == {1, 2, 3}
    assert "outside the integers" in reasons[1]
    assert "ResponseLogprobs" in reasons[2]
    assert "not valid JSON" in reasons[3] and {k for _, k, r in bad if r.offset == 3} == {"RecordError"}


@pytest.mark.parametrize("values", [[-1], [2**32], ["7"], [1, "x"], "123", 5])
def test_token_ids_must_be_uint32(values: object) -> None:
    with pytest.raises(RowError):
        uint32_list(values, "ids")


def test_valid_lists_pass_through() -> None:
    assert uint32_list((0, 2**32 - 1), "ids") == [0, 2**32 - 1]
    assert uint32_list(None, "ids") == [] and float_list(None, "lp") == []
    with pytest.raises(RowError):
        float_list({"a": 1}, "lp")


def test_a_span_taken_from_its_bytes_that_arrow_refuses_is_isolated_with_the_model_paths_reason() -> None:
    from agl_stream.types import Span

    def span(i: int, start: float) -> bytes:
        return encode(Span(rollout_id="ro-000000000001", attempt_id="at-00000001", sequence_id=i, trace_id="a" * 32,
                           span_id=f"{i:016x}", name="x", attributes={"k": "v", "n": i}, start_time=start))  # fmt: skip

    settings = Settings.from_env(env={}, kafka_bootstrap="127.0.0.1:9")
    sink = Sink(SINKS["spans"], settings, ch=None, dlq=None)  # type: ignore[arg-type]
    batch = _Batch(records=[_record(0, span(1, 1.0)), _record(1, span(2, 1e12)), _record(2, span(3, 3.0)), _record(3)])
    table, bad = sink._rows(batch)  # 1e12 s is past what nanoseconds in Int64 hold
    assert table.column("SequenceId").to_pylist() == [1, 3]
    assert table.column("SpanAttributes").to_pylist() == [[("k", "v"), ("n", "1")], [("k", "v"), ("n", "3")]]
    reasons = {record.offset: (reason, kind) for reason, kind, record in bad}
    assert set(reasons) == {1, 3}
    assert reasons[1][0].startswith("cannot convert to spans rows: column Timestamp") and reasons[1][1] == "RowError"
    assert sink.stats.fast_records == 3
