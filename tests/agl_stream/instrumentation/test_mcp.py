"""MCP client tool calls as tool spans (``agl_stream.instrumentation.mcp``): success, ``isError`` and raised
errors, the AIR rules firing on them, and the registry activating it when the agent imports ``mcp``.

The servers run in-process (``mcp.Client(MCPServer)``); the stdio transport is exercised by the rag
example's pipeline test (``tests/examples/test_rag_agent.py``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any, Iterator

import pytest

pytest.importorskip("mcp")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from agl_stream.instrumentation import mcp as mcp_instrumentation  # noqa: E402
from agl_stream.instrumentation.mcp import MCPInstrumentor  # noqa: E402


def make_server() -> Any:
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("test-tools", log_level="WARNING")

    @server.tool(structured_output=False)
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(structured_output=False)
    def lookup(city: str) -> str:
        raise ToolError(f"unknown city {city}")

    @server.tool(structured_output=False)
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "done"

    return server


@pytest.fixture
def instrumented() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    """Tool spans go to an in-memory exporter; the process's instrumentation is restored afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    state = mcp_instrumentation._STATE
    before = (state.tracer, state.wrapped)
    MCPInstrumentor().instrument(tracer_provider=provider)
    yield exporter, provider
    if before[1]:
        state.tracer = before[0]
    else:
        MCPInstrumentor().uninstrument()


async def call_tools() -> list[Any]:
    from mcp import Client

    outcomes: list[Any] = []
    async with Client(make_server()) as client:
        outcomes.append(await client.call_tool("add", {"a": 2, "b": 3}))
        outcomes.append(await client.call_tool("lookup", {"city": "Atlantis"}))
        try:
            await client.session.call_tool("slow", {"seconds": 5}, read_timeout_seconds=0.2)
        except Exception as exc:  # the SDK's MCPError: the request timed out
            outcomes.append(exc)
    return outcomes


def tool_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("openinference.span.kind") == "TOOL"]


def test_call_tool_records_a_tool_span_with_arguments_result_and_error_status(instrumented: Any) -> None:
    exporter, provider = instrumented
    with provider.get_tracer("test").start_as_current_span("agent"):
        outcomes = asyncio.run(call_tools())
    assert outcomes[0].is_error is False and outcomes[1].is_error is True and "timed out" in str(outcomes[2]).lower()

    spans = {s.name: s for s in tool_spans(exporter)}
    assert list(spans) == ["add.tool", "lookup.tool", "slow.tool"]
    agent = next(s for s in exporter.get_finished_spans() if s.name == "agent")
    assert all(s.parent is not None and s.parent.span_id == agent.context.span_id for s in spans.values())

    ok = spans["add.tool"].attributes or {}
    assert (ok["tool.name"], json.loads(str(ok["input.value"])), ok["output.value"]) == ("add", {"a": 2, "b": 3}, "5")
    assert (ok["agentops.span.kind"], ok["mcp.method.name"], ok["mcp.tool.is_error"]) == ("tool", "tools/call", False)
    assert spans["add.tool"].status.status_code == StatusCode.UNSET

    failed = spans["lookup.tool"]  # the tool answered isError: the call returned, the span says it failed
    assert failed.status.status_code == StatusCode.ERROR and "unknown city Atlantis" in str(failed.status.description)
    assert (failed.attributes or {})["mcp.tool.is_error"] is True and not failed.events

    raised = spans["slow.tool"]  # the call raised: the exception is recorded and propagated
    assert raised.status.status_code == StatusCode.ERROR and "timed out" in str(raised.status.description).lower()
    assert [e.name for e in raised.events] == ["exception"] and "output.value" not in (raised.attributes or {})


def test_uninstrument_stops_recording(instrumented: Any) -> None:
    exporter, provider = instrumented
    MCPInstrumentor().uninstrument()
    try:
        asyncio.run(call_tools())
    finally:
        MCPInstrumentor().instrument(tracer_provider=provider)
    assert tool_spans(exporter) == []


def test_air_rules_fire_on_mcp_tool_spans() -> None:
    """With ``air.auto_instrument()``, success and failure rules fire on MCP tool spans like on ``@air.tool`` calls."""
    from agl_stream import air, semconv
    from agl_stream.air.instrument import FRAMEWORK_TOOLS
    from agl_stream.air import record
    from agl_stream.tracer.compat import DummyTracer
    from agl_stream.tracer.otel import install_global_processor

    state = mcp_instrumentation._STATE
    before = (state.tracer, state.wrapped)
    calls: list[air.ToolCall] = []
    air.clear_rules()
    air.on_tool_success(lambda call: calls.append(call) or 0.5, tool="add", name="added")
    air.on_tool_failure(lambda call: calls.append(call) or -0.5, tool=["lookup", "slow"], name="failed")
    try:
        air.auto_instrument(trace_llm_calls=True, trace_tool_calls=True, trace_context=False)
        MCPInstrumentor().instrument(tracer_provider=install_global_processor())
        tracer = DummyTracer()
        with tracer.attempt_scope(rollout_id="ro-0000000000b1", attempt_id="at-000000b1"):
            asyncio.run(call_tools())
    finally:
        air.clear_rules()
        record.SETTINGS.trace_tool_calls = True
        FRAMEWORK_TOOLS.enabled = False
        if before[1]:
            state.tracer = before[0]
        else:
            MCPInstrumentor().uninstrument()
    assert [(c.tool_name, dict(c.args)) for c in calls] == [
        ("add", {"a": 2, "b": 3}), ("lookup", {"city": "Atlantis"}), ("slow", {"seconds": 5})]
    assert calls[0].result == "5" and calls[0].error is None and calls[0].span_id is not None
    assert isinstance(calls[1].error, air.RecordedToolError) and "unknown city Atlantis" in str(calls[1].error)
    assert calls[1].result is None and "timed out" in str(calls[2].error).lower()
    rewards = [s for s in tracer.spans if s.name == semconv.AGL_ANNOTATION]
    assert [(s.attributes[record.RULE], s.attributes["agentlightning.reward.0.value"]) for s in rewards] == [
        ("added", 0.5), ("failed", -0.5), ("failed", -0.5)]


def test_the_registry_activates_it_when_the_agent_imports_mcp() -> None:
    """Armed when the tracer starts, activated by ``import mcp``: a call then records its tool span."""
    code = (
        "import asyncio, sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "from agl_stream.instrumentation import active, instrument_installed\n"
        "exporter = InMemorySpanExporter(); provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "print('armed:' + ','.join(instrument_installed(provider)))\n"
        "print('imported:' + str('mcp' in sys.modules))\n"
        "import mcp\n"
        "print('active:' + ','.join(active()))\n"
        "from tests.agl_stream.instrumentation.test_mcp import call_tools\n"
        "asyncio.run(call_tools())\n"
        "print('spans:' + ','.join(s.name for s in exporter.get_finished_spans()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    lines = dict(line.split(":", 1) for line in out.stdout.split())
    assert "mcp" in lines["armed"].split(",") and lines["imported"] == "False", out.stdout
    assert "mcp" in lines["active"].split(","), out.stdout + out.stderr
    assert lines["spans"].split(",") == ["add.tool", "lookup.tool", "slow.tool"], out.stdout + out.stderr
