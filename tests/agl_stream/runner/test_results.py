"""Return values of rollouts become spans with upstream's conversions and warnings (pure logic)."""

from __future__ import annotations

import logging

import pytest

from agl_stream.emitter import emit_reward, find_final_reward
from agl_stream.runner.results import record_result
from agl_stream.types import SpanCoreFields
from tests.agl_stream.tracer.fakes import list_tracer


def test_float_int_bool_and_double_reward(caplog: pytest.LogCaptureFixture) -> None:
    tracer, sink = list_tracer()
    caplog.set_level(logging.WARNING)
    try:
        with tracer.attempt_scope(rollout_id="ro-a", attempt_id="at-a") as state:
            record_result(None, tracer, state)
            assert state.submitted == 0
            record_result(True, tracer, state)
            record_result(2, tracer, state)
            assert "returned a bool" in caplog.text and "returned an int" in caplog.text
            assert "counted twice" in caplog.text  # the int came after the bool's reward
            emit_reward(0.1)
            record_result(0.9, tracer, state)
        tracer.pipeline.flush(timeout=10)
        assert state.reward_spans == 4 and state.last_reward == 0.9
        assert find_final_reward(sink.spans) == 0.9
    finally:
        tracer.teardown()


def test_span_lists_and_bad_values() -> None:
    tracer, sink = list_tracer()
    try:
        with tracer.attempt_scope(rollout_id="ro-b", attempt_id="at-b") as state:
            record_result([SpanCoreFields(name="a"), SpanCoreFields(name="b")], tracer, state)
            with pytest.raises(TypeError, match="list of spans"):
                record_result([SpanCoreFields(name="c"), {"name": "dict"}], tracer, state)
            with pytest.raises(TypeError, match="must return None, a float or a list"):
                record_result("done", tracer, state)
        tracer.pipeline.flush(timeout=10)
        assert sorted(s.name for s in sink.spans) == ["a", "b"]
    finally:
        tracer.teardown()
