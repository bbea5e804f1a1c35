"""AIR, automatic intermediate rewards (the Agent Lightning paper's idea, as an additional API).

A trajectory's final reward says how the whole rollout went; AIR adds a reward per step, computed
from what the tools the model asked for did. Trace tools with ``@air.tool`` (or let a framework's
instrumentation trace them, see :func:`auto_instrument`), register plain functions as rules::

    @air.tool
    def search(query: str) -> str: ...

    @air.on_tool_failure(tool="search")
    def broken_query(call: air.ToolCall) -> float:
        return -0.2

and each number a rule returns is emitted as an intermediate reward right after the tool call. The
triplet adapter gives it to the LLM call whose output asked for the tool (the one that ended last
before the tool started), beside upstream's matching of ordinary rewards, which it leaves as it is;
the agent's returned (final) reward stays the final reward. A rule that raises costs only its
reward: the tool's result or exception reaches the agent unchanged and the error becomes a dead
letter (``agl.dlq``, the ``dead_letters`` table). Details: ``docs/train-your-agent.md``.
"""

from __future__ import annotations

from agl_stream.air.instrument import RecordedToolError, auto_instrument
from agl_stream.air.record import AirSettings
from agl_stream.air.rules import (
    CodeExecution,
    Rule,
    RuleError,
    RuleOutcome,
    RuleRegistry,
    ToolCall,
    ToolEvent,
    clear_rules,
    on_code_execution,
    on_tool_failure,
    on_tool_success,
    registered_rules,
    remove_rule,
)
from agl_stream.air.tool import tool

__all__ = [
    "AirSettings",
    "CodeExecution",
    "RecordedToolError",
    "Rule",
    "RuleError",
    "RuleOutcome",
    "RuleRegistry",
    "ToolCall",
    "ToolEvent",
    "auto_instrument",
    "clear_rules",
    "on_code_execution",
    "on_tool_failure",
    "on_tool_success",
    "registered_rules",
    "remove_rule",
    "tool",
]
