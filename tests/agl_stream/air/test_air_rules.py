"""AIR without the stack: rule registration and filters, the info rules get, rewards and their marks,
raising rules, and how the triplet adapter places intermediate rewards (hand-built spans)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator, Optional

import pytest

import agl_stream as agl
from agl_stream import air, semconv
from agl_stream.adapter import TracerTraceToTriplet, find_final_reward
from agl_stream.air import record
from agl_stream.air.rules import REGISTRY, RuleRegistry
from agl_stream.runner import runner as runner_module
from agl_stream.tracer.base import get_active_attempt
from agl_stream.tracer.compat import DummyTracer
from agl_stream.types import DeadLetter, SpanCoreFields
from tests.agl_stream.adapter.spans import SpanBuilder


@pytest.fixture(autouse=True)
def no_rules() -> Iterator[None]:
    """No rule and AIR's default switches before and after each test (both are process-wide)."""
    from agl_stream.air.instrument import FRAMEWORK_TOOLS

    air.clear_rules()
    yield
    air.clear_rules()
    record.SETTINGS.trace_tool_calls = True
    FRAMEWORK_TOOLS.enabled = False


@pytest.fixture
def attempt() -> Iterator[DummyTracer]:
    """An active attempt whose emitted spans stay in memory."""
    tracer = DummyTracer()
    with tracer.attempt_scope(rollout_id="ro-0000000000a1", attempt_id="at-000000a1"):
        yield tracer


def rewards(tracer: DummyTracer) -> list[SpanCoreFields]:
    return [s for s in tracer.spans if s.name == semconv.AGL_ANNOTATION]


def reward_values(tracer: DummyTracer) -> list[tuple[str, float]]:
    return [(s.attributes[record.RULE], s.attributes["agentlightning.reward.0.value"]) for s in rewards(tracer)]


@air.tool
def add(a: int, b: int = 0) -> int:
    return a + b


@air.tool(name="divide")
def div(a: float, b: float) -> float:
    return a / b


# ---------------------------------------------------------------------------------------------- registration


def test_registration_forms_filters_and_removal() -> None:
    def plain(call: air.ToolCall) -> float:
        return 1.0

    assert air.on_tool_success(plain) is plain  # a direct call returns the function unchanged

    @air.on_tool_success("add")
    def only_add(call: air.ToolCall) -> float:
        return 2.0

    @air.on_tool_failure(tool=["divide", "other"], name="div-failed")
    def on_div(call: air.ToolCall) -> float:
        return -1.0

    @air.on_code_execution
    def ran(run: air.CodeExecution) -> None:
        return None

    rules = air.registered_rules()
    assert [(r.event, r.name, r.tools) for r in rules] == [
        ("success", plain.__qualname__, None),
        ("success", only_add.__qualname__, frozenset({"add"})),
        ("failure", "div-failed", frozenset({"divide", "other"})),
        ("code_execution", ran.__qualname__, None),
    ]
    assert [r.fn for r in REGISTRY.matching("success", "add")] == [plain, only_add]
    assert [r.fn for r in REGISTRY.matching("success", "divide")] == [plain]
    assert [r.fn for r in REGISTRY.matching("failure", "add")] == []
    assert air.remove_rule(plain) == 1 and air.remove_rule(plain) == 0
    assert [r.fn for r in air.registered_rules()] == [only_add, on_div, ran]
    with pytest.raises(ValueError, match="tool name"):
        air.on_tool_success(tool=[])
    with pytest.raises(TypeError, match="once"):
        air.on_tool_success("a", tool="b")
    with pytest.raises(ValueError, match="code_arg"):
        air.tool(code_execution=True, code_arg="missing")(lambda code: code)


def test_a_separate_registry_keeps_its_rules_apart() -> None:
    mine = RuleRegistry()
    air.on_tool_success(lambda call: 1.0, registry=mine, name="mine")
    assert [r.name for r in mine.rules()] == ["mine"] and air.registered_rules() == []


# ---------------------------------------------------------------------------------------------- what rules get


def test_success_rule_gets_the_call_and_its_reward_is_marked_intermediate(attempt: DummyTracer) -> None:
    seen: list[air.ToolCall] = []

    @air.on_tool_success("add")
    def good(call: air.ToolCall) -> float:
        seen.append(call)
        return 0.25

    before = time.time()
    assert add(2, b=3) == 5
    (call,) = seen
    assert call.tool_name == "add" and dict(call.args) == {"a": 2, "b": 3} and call.result == 5
    assert call.succeeded and call.error is None and 0 <= call.duration < 5 and call.started_at >= before
    tool_span, reward = attempt.spans  # the tool span first, its reward right after
    assert tool_span.name == "add.tool" and tool_span.attributes["openinference.span.kind"] == "TOOL"
    assert tool_span.attributes["tool.name"] == "add"
    assert json.loads(tool_span.attributes["input.value"]) == {"a": 2, "b": 3}
    assert tool_span.attributes["output.value"] == "5"
    assert reward.attributes["agentlightning.reward.0.value"] == 0.25
    assert reward.attributes[semconv.REWARD_INTERMEDIATE] is True
    assert reward.attributes[semconv.REWARD_ANCHOR_TIME] == call.started_at
    assert (reward.attributes[record.RULE], reward.attributes[record.EVENT], reward.attributes[record.TOOL_NAME]) == (
        good.__qualname__, "success", "add")
    assert find_final_reward(attempt.spans) is None  # an intermediate reward is never the final one


def test_failure_rule_gets_the_exception_which_still_reaches_the_agent(attempt: DummyTracer) -> None:
    seen: list[air.ToolCall] = []
    air.on_tool_failure(lambda call: seen.append(call) or -1.0, tool="divide", name="penalty")
    air.on_tool_success(lambda call: 1.0, name="never")

    with pytest.raises(ZeroDivisionError) as raised:
        div(1.0, 0.0)
    (call,) = seen
    assert call.error is raised.value and not call.succeeded and call.result is None and call.tool_name == "divide"
    tool_span = attempt.spans[0]
    assert tool_span.status.status_code == "ERROR" and tool_span.attributes["exception.type"] == "ZeroDivisionError"
    assert reward_values(attempt) == [("penalty", -1.0)]


def test_code_execution_rules_get_code_output_and_error(attempt: DummyTracer) -> None:
    @air.tool(code_execution=True)
    def run_python(code: str, timeout: float = 1.0) -> str:
        namespace: dict[str, Any] = {}
        exec(code, namespace)
        return str(namespace.get("out"))

    runs: list[air.CodeExecution] = []
    air.on_code_execution(lambda run: runs.append(run) or (0.1 if run.succeeded else -0.1), name="ran")
    air.on_tool_success(lambda call: 1.0, tool="run_python", name="also-success")

    assert run_python("out = 6 * 7") == "42"
    with pytest.raises(NameError):
        run_python(code="out = missing")
    assert [(r.code, r.stdout, type(r.error).__name__) for r in runs] == [
        ("out = 6 * 7", "42", "NoneType"), ("out = missing", None, "NameError")]
    assert isinstance(runs[0], air.CodeExecution) and isinstance(runs[0], air.ToolCall)
    # a code tool fires its success/failure rules, then its code-execution rules
    assert reward_values(attempt) == [("also-success", 1.0), ("ran", 0.1), ("ran", -0.1)]
    assert all(s.attributes.get(record.CODE_EXECUTION) for s in attempt.spans if s.name.endswith(".tool"))

    @air.tool(code_execution=True, code_arg="source")
    def sandbox(lang: str, source: str) -> dict[str, str]:
        return {"stdout": f"{lang}:{source}"}

    runs.clear()
    sandbox("py", source="print(1)")
    assert (runs[0].code, runs[0].stdout) == ("print(1)", "py:print(1)")


async def test_async_tools_and_none_and_bool_returns(attempt: DummyTracer) -> None:
    @air.tool
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"<html>{url}</html>"

    air.on_tool_success(lambda call: None, name="nothing")
    air.on_tool_success(lambda call: call.result.startswith("<html>"), name="is-html")
    assert await fetch("a") == "<html>a</html>"
    assert reward_values(attempt) == [("is-html", 1.0)]  # None gives no reward; a bool counts as 0/1


def test_arguments_by_name_include_defaults(attempt: DummyTracer) -> None:
    seen: list[air.ToolCall] = []
    air.on_tool_success(lambda call: seen.append(call))
    add(1)
    assert dict(seen[0].args) == {"a": 1, "b": 0}


def test_intermediate_rewards_are_not_the_runners_final_reward() -> None:
    """The runner's ``final_reward`` (and its emitted-and-returned warning) ignore intermediate rewards."""
    from agl_stream.tracer.exporter import AttemptCounters
    from agl_stream.tracer.otel import _note_reward

    state = AttemptCounters(rollout_id="ro-0000000000a1", attempt_id="at-000000a1")
    marked = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.5,
              semconv.REWARD_INTERMEDIATE: True}  # fmt: skip
    _note_reward(semconv.AGL_ANNOTATION, marked, state)
    assert (state.reward_spans, state.last_reward) == (0, None)
    plain = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0}
    _note_reward(semconv.AGL_ANNOTATION, plain, state)
    assert (state.reward_spans, state.last_reward) == (1, 1.0)


def test_outside_a_rollout_the_tool_just_runs() -> None:
    air.on_tool_success(lambda call: 1.0)
    assert get_active_attempt() is None and add(1, 2) == 3


def test_turning_tool_tracing_off_keeps_the_rules(attempt: DummyTracer) -> None:
    air.on_tool_success(lambda call: 0.5, name="still")
    try:
        record.SETTINGS.trace_tool_calls = False
        add(1)
    finally:
        record.SETTINGS.trace_tool_calls = True
    assert [s.name for s in attempt.spans] == [semconv.AGL_ANNOTATION] and reward_values(attempt) == [("still", 0.5)]


# ---------------------------------------------------------------------------------------------- rules that fail


class FakeRunner:
    """What AIR uses of the runner executing the attempt: settings, worker id and ``send_dead_letter``."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []
        self.worker_id = "Worker-test"
        self.settings = agl.Settings.from_env(env={}, topic_prefix="tair")

    def send_dead_letter(self, letter: DeadLetter) -> "Future[None]":
        self.letters.append(letter)
        future: Future[None] = Future()
        future.set_result(None)
        return future


@pytest.fixture
def fake_runner() -> Iterator[FakeRunner]:
    fake = FakeRunner()
    token = runner_module._CURRENT.set(fake)  # type: ignore[arg-type]
    yield fake
    runner_module._CURRENT.reset(token)


def test_a_raising_rule_costs_only_its_reward_and_becomes_a_dead_letter(
    attempt: DummyTracer, fake_runner: FakeRunner
) -> None:
    @air.on_tool_success(tool="add")
    def broken(call: air.ToolCall) -> float:
        raise KeyError("no such column")

    air.on_tool_success(lambda call: 0.5, name="fine")
    assert add(20, 22) == 42  # the result is returned unchanged
    assert reward_values(attempt) == [("fine", 0.5)]  # the other rules still count
    (letter,) = fake_runner.letters
    assert f"AIR rule {broken.__qualname__!r} raised KeyError" in letter.reason and "'no such column'" in letter.reason
    assert letter.error_type == "KeyError" and letter.processor == "air:Worker-test"
    assert letter.source_topic == "tair.spans" and letter.key == b"ro-0000000000a1"
    body = json.loads(letter.payload)
    assert body["rollout_id"] == "ro-0000000000a1" and body["attempt_id"] == "at-000000a1"
    assert body["tool"] == "add" and body["event"] == "success" and json.loads(body["args"]) == {"a": 20, "b": 22}
    assert "KeyError" in body["traceback"]


def test_a_rule_that_returns_no_number_is_an_error_too(attempt: DummyTracer, fake_runner: FakeRunner) -> None:
    air.on_tool_failure(lambda call: "bad", name="text")
    air.on_tool_failure(lambda call: float("nan"), name="nan")

    async def later(call: air.ToolCall) -> float:
        return 1.0

    air.on_tool_failure(later, name="async")
    with pytest.raises(ZeroDivisionError):
        div(1, 0)
    assert [(l.error_type, l.reason.split(":")[0]) for l in fake_runner.letters] == [
        ("RuleError", "AIR rule 'text' raised RuleError"), ("RuleError", "AIR rule 'nan' raised RuleError"),
        ("RuleError", "AIR rule 'async' raised RuleError")]
    assert "returned str, not a number" in fake_runner.letters[0].reason and rewards(attempt) == []


def test_without_a_runner_a_rule_error_is_logged(attempt: DummyTracer, caplog: pytest.LogCaptureFixture) -> None:
    air.on_tool_success(lambda call: 1 / 0, name="zero")
    with caplog.at_level(logging.ERROR, logger="agl_stream.air.record"):
        assert add(1, 1) == 2
    assert "AIR rule 'zero' raised ZeroDivisionError" in caplog.text and "no dead letter" in caplog.text


# ---------------------------------------------------------------------------------------------- the adapter


def air_reward(b: SpanBuilder, value: float, at: float, anchor: Optional[float]) -> None:
    attrs: dict[str, Any] = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value,
                             semconv.REWARD_INTERMEDIATE: True}  # fmt: skip
    if anchor is not None:
        attrs[semconv.REWARD_ANCHOR_TIME] = anchor
    b.span(semconv.AGL_ANNOTATION, at, at, attributes=attrs)


def test_each_intermediate_reward_goes_to_the_call_that_requested_the_tool() -> None:
    b = SpanBuilder()
    b.llm(0.0, 1.0, prompt=[1], response=[2], response_id="c1")
    b.span("add.tool", 1.1, 1.2)
    air_reward(b, 0.5, 1.3, anchor=1.1)
    b.llm(2.0, 3.0, prompt=[3], response=[4], response_id="c2")
    b.span("divide.tool", 3.1, 3.2)
    air_reward(b, -1.0, 3.3, anchor=3.1)
    b.llm(4.0, 5.0, prompt=[5], response=[6], response_id="c3")
    b.reward(1.0, 6.0)  # the agent's returned reward
    triplets = TracerTraceToTriplet().adapt(b.spans)
    assert [t.reward for t in triplets] == [0.5, -1.0, 1.0]
    assert [t.metadata.get("intermediate_rewards") for t in triplets] == [[0.5], [-1.0], None]
    assert find_final_reward(b.spans) == 1.0


def test_two_tools_of_one_call_add_up_and_the_final_reward_keeps_its_call() -> None:
    """Upstream's matching alone would move the second tool's reward and the final reward to earlier
    calls (each call takes one reward); intermediate rewards stay with the call that asked for the tool."""
    b = SpanBuilder()
    b.llm(0.0, 1.0, prompt=[1], response=[2], response_id="c1")
    b.llm(2.0, 3.0, prompt=[3], response=[4], response_id="c2")
    b.span("search.tool", 3.1, 3.2)
    air_reward(b, 0.25, 3.3, anchor=3.1)
    b.span("search.tool", 3.4, 3.5)
    air_reward(b, -0.5, 3.6, anchor=3.4)
    b.reward(1.0, 4.0)
    triplets = TracerTraceToTriplet().adapt(b.spans)
    assert [t.reward for t in triplets] == [None, 1.0 + 0.25 - 0.5]
    assert triplets[1].metadata["intermediate_rewards"] == [0.25, -0.5]
    assert find_final_reward(b.spans) == 1.0


def test_llm_calls_inside_the_tool_do_not_take_its_reward() -> None:
    b = SpanBuilder()
    b.llm(0.0, 1.0, prompt=[1], response=[2], response_id="c1")
    tool = b.span("summarize.tool", 1.1, 2.0)
    b.llm(1.2, 1.9, tool, prompt=[7], response=[8], response_id="inner")
    air_reward(b, 0.5, 2.1, anchor=1.1)
    b.llm(3.0, 4.0, prompt=[3], response=[4], response_id="c2")
    assert [t.reward for t in TracerTraceToTriplet().adapt(b.spans)] == [0.5, None, None]


def test_ordinary_rewards_keep_upstreams_matching_beside_intermediate_ones() -> None:
    b = SpanBuilder()
    b.llm(0.0, 1.0, prompt=[1], response=[2], response_id="c1")
    b.reward(0.3, 1.5)  # an ordinary emit_reward: upstream's rule, the call it follows
    air_reward(b, 0.2, 1.6, anchor=None)  # no anchor: its own start
    b.llm(2.0, 3.0, prompt=[3], response=[4], response_id="c2")
    triplets = TracerTraceToTriplet().adapt(b.spans)
    assert [t.reward for t in triplets] == [pytest.approx(0.5), None]
    assert find_final_reward(b.spans) == 0.3


def test_marks_read_back_as_text_count_too() -> None:
    """Attributes that went through ClickHouse (``agl-stream replay``) come back as text."""
    b = SpanBuilder()
    b.llm(0.0, 1.0, prompt=[1], response=[2], response_id="c1")
    b.span(semconv.AGL_ANNOTATION, 2.0, 2.0, attributes={
        "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": "0.5",
        semconv.REWARD_INTERMEDIATE: "true", semconv.REWARD_ANCHOR_TIME: "1.5"})  # fmt: skip
    b.llm(3.0, 4.0, prompt=[3], response=[4], response_id="c2")
    b.reward(1.0, 5.0)
    assert [t.reward for t in TracerTraceToTriplet().adapt(b.spans)] == [0.5, 1.0]
    assert find_final_reward(b.spans) == 1.0


# ---------------------------------------------------------------------------------------------- auto_instrument


def test_framework_tool_spans_fire_the_rules(attempt: DummyTracer) -> None:
    """A TOOL span another instrumentation records (OpenInference conventions) fires the same rules."""
    from opentelemetry import trace as otel_trace

    calls: list[air.ToolCall] = []
    air.on_tool_success(lambda call: calls.append(call) or 0.5, tool="lookup", name="found")
    air.on_tool_failure(lambda call: calls.append(call) or -0.5, tool="lookup", name="lost")
    settings = air.auto_instrument(trace_llm_calls=True, trace_tool_calls=True, trace_context=False)
    assert settings.trace_tool_calls
    tracer = otel_trace.get_tracer("a.framework")
    attrs = {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": '{"city": "Paris"}'}
    with tracer.start_as_current_span("lookup", attributes={**attrs, "output.value": "France"}):
        pass
    with pytest.raises(LookupError):
        with tracer.start_as_current_span("lookup", attributes=attrs):
            raise LookupError("unknown city")
    assert [(c.tool_name, dict(c.args), c.result, str(c.error) if c.error else None) for c in calls] == [
        ("lookup", {"city": "Paris"}, "France", None), ("lookup", {"city": "Paris"}, None, "LookupError: unknown city")]
    assert isinstance(calls[1].error, air.RecordedToolError) and calls[0].span_id is not None
    assert reward_values(attempt) == [("found", 0.5), ("lost", -0.5)]
    anchors = [s.attributes[semconv.REWARD_ANCHOR_TIME] for s in rewards(attempt)]
    assert anchors == [c.started_at for c in calls]


def test_trace_context_carries_the_attempt_into_thread_pools(attempt: DummyTracer) -> None:
    def active() -> Optional[str]:
        found = get_active_attempt()
        return found.state.attempt_id if found is not None else None

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(active).result() is None  # a plain pool loses the context
        air.auto_instrument(trace_context=True)
        try:
            assert pool.submit(active).result() == "at-000000a1"
        finally:
            air.auto_instrument(trace_context=False)
        assert pool.submit(active).result() is None


def test_trace_llm_calls_switches_the_openai_instrumentation_for_the_process() -> None:
    """In a fresh process: off removes the active instrumentation and sets the switch later runners read;
    on undoes it (and never overrides an operator's switch)."""
    code = (
        "import os\n"
        "from agl_stream.tracer.otel import install_global_processor\n"
        "from agl_stream.instrumentation import active, instrument_installed\n"
        "from agl_stream import air\n"
        "instrument_installed(install_global_processor())\n"
        "import openai\n"
        "print('start', active(), os.environ.get('AGL_INSTRUMENT_OPENAI'))\n"
        "s = air.auto_instrument(trace_llm_calls=False, trace_tool_calls=False, trace_context=False)\n"
        "print('off', active(), os.environ.get('AGL_INSTRUMENT_OPENAI'), s.trace_llm_calls)\n"
        "s = air.auto_instrument(trace_llm_calls=True, trace_tool_calls=False, trace_context=False)\n"
        "print('on', active(), os.environ.get('AGL_INSTRUMENT_OPENAI'), s.trace_llm_calls)\n"
        "os.environ['AGL_INSTRUMENT_OPENAI'] = '0'\n"
        "s = air.auto_instrument(trace_tool_calls=False, trace_context=False)\n"
        "print('operator', os.environ.get('AGL_INSTRUMENT_OPENAI'), s.trace_llm_calls)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("AGL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        "start ['openai'] None", "off [] 0 False", "on ['openai'] None True", "operator 0 False"]
