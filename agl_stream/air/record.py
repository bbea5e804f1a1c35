"""Recording what AIR rules gave: intermediate reward spans, and dead letters for rules that raised.

Rewards: each number a rule returns becomes an ordinary ``emit_reward`` span, right after the tool
call, marked ``agl.reward.intermediate`` with the call's start as ``agl.reward.anchor_time``. The
triplet adapter gives it to the LLM call that had ended last when the tool started (the call whose
output asked for the tool), keeps it out of upstream's matching of ordinary rewards and never takes
it for the final reward (:mod:`agl_stream.adapter.tree`).

Errors: a rule that raises (or returns something that is not a number) costs only its reward. The
error becomes a :class:`~agl_stream.types.DeadLetter` on ``agl.dlq`` (so the ``dead_letters`` table)
produced by the runner executing the attempt, which agent code reaches through
:func:`agl_stream.runner.runner.current_runner` (a context variable that follows the agent into
its threads); without a runner (a plain script, an upstream runner) it is logged.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import sys
import traceback
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Optional

from agl_stream.air.rules import REGISTRY, CodeExecution, RuleOutcome, ToolCall, ToolEvent
from agl_stream.semconv import (
    AGL_OPERATION,
    AGL_REWARD,
    REWARD_ANCHOR_TIME,
    REWARD_INTERMEDIATE,
    LightningSpanAttributes,
)

logger = logging.getLogger(__name__)

#: attributes AIR puts on its reward spans, beside upstream's reward attributes
RULE = "agl.air.rule"
EVENT = "agl.air.event"
TOOL_NAME = "agl.air.tool.name"
TOOL_SPAN_ID = "agl.air.tool.span_id"
#: on tool spans ``@air.tool`` records (so the framework-tool processor leaves them to the decorator)
AIR_TOOL = "agl.air.tool"
CODE_EXECUTION = "agl.air.code_execution"
#: the processor name on AIR's dead letters (``dead_letters.Processor``), followed by the worker id
DEAD_LETTER_PROCESSOR = "air"
_MAX_TEXT = 16 * 1024  # each text a dead letter keeps (arguments, code, traceback) is cut: far below the broker limit


@dataclass
class AirSettings:
    """What :func:`agl_stream.air.auto_instrument` switched on in this process."""

    trace_llm_calls: bool = True
    trace_tool_calls: bool = True
    trace_context: bool = False


SETTINGS = AirSettings()


def rules_pending(tool_name: str, events: list[ToolEvent]) -> bool:
    return any(REGISTRY.matching(event, tool_name) for event in events)


def apply_rules(call: ToolCall, events: list[ToolEvent]) -> list[RuleOutcome]:
    """Run the matching rules of one finished call, then record their rewards and errors; never raises."""
    if not rules_pending(call.tool_name, events):
        return []
    try:
        with _reward_operation(call):
            outcomes = REGISTRY.evaluate(call, events)
        for outcome in outcomes:
            if outcome.error is not None:
                report_rule_error(call, outcome)
            elif outcome.reward is not None:
                emit_intermediate_reward(call, outcome)
        return outcomes
    except Exception:  # recording must not break the agent either
        logger.exception("AIR could not record the rules of a %s call", call.tool_name)
        return []


def _reward_operation(call: ToolCall) -> AbstractContextManager[Any]:
    """Rules run inside upstream's reward operation span (``agentlightning.operation`` named
    ``agentlightning.reward``) when an OpenTelemetry tracer records the attempt, so LLM calls a rule
    makes (a judge) are never taken for the agent's own calls."""
    from agl_stream.tracer.base import get_active_tracer

    tracer = get_active_tracer()
    otel_module = sys.modules.get("agl_stream.tracer.otel")
    if tracer is None or otel_module is None or not isinstance(tracer, otel_module.OtelTracer):
        return nullcontext()
    from opentelemetry import trace as otel_trace

    attributes = {LightningSpanAttributes.OPERATION_NAME.value: AGL_REWARD, TOOL_NAME: call.tool_name}
    tracer_of_spans = otel_trace.get_tracer(otel_module.INSTRUMENTATION_NAME)
    return tracer_of_spans.start_as_current_span(AGL_OPERATION, attributes=attributes)


def emit_intermediate_reward(call: ToolCall, outcome: RuleOutcome) -> bool:
    """One reward span for one rule's reward (outside an attempt there is nowhere to put it: False)."""
    from agl_stream.emitter.reward import emit_reward
    from agl_stream.tracer.base import get_active_tracer

    if get_active_tracer() is None or outcome.reward is None:
        return False
    attributes: dict[str, Any] = {
        REWARD_INTERMEDIATE: True,
        REWARD_ANCHOR_TIME: call.started_at,
        RULE: outcome.rule.name,
        EVENT: outcome.event,
        TOOL_NAME: call.tool_name,
    }
    if call.span_id:
        attributes[TOOL_SPAN_ID] = call.span_id
    emit_reward(outcome.reward, attributes=attributes)
    return True


def rule_error_reason(call: ToolCall, outcome: RuleOutcome) -> str:
    error = outcome.error
    return (
        f"AIR rule {outcome.rule.name!r} raised {type(error).__name__}: {error} "
        f"(on the {outcome.event} of tool {call.tool_name!r}; its reward is dropped, the tool's result is unchanged)"
    )


def dead_letter_payload(
    call: ToolCall, outcome: RuleOutcome, rollout_id: Optional[str], attempt_id: Optional[str]
) -> bytes:
    """The letter's body: which call of which attempt, the rule and its traceback (the call's start and
    span id keep letters of separate calls apart in the ``dead_letters`` table)."""
    error = outcome.error
    args = _text(dict(call.args))
    if len(args) > _MAX_TEXT:
        args = args[:_MAX_TEXT] + f"... ({len(args)} characters)"
    body: dict[str, Any] = {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "rule": outcome.rule.name,
        "event": outcome.event,
        "tool": call.tool_name,
        "tool_span_id": call.span_id,
        "started_at": call.started_at,
        "args": args,
        "tool_error": None if call.error is None else f"{type(call.error).__name__}: {call.error}",
        "error": f"{type(error).__name__}: {error}",
        "traceback": _tail("".join(traceback.format_exception(error))) if error is not None else "",
    }
    if isinstance(call, CodeExecution):
        body["code"] = call.code[:_MAX_TEXT]
    return json.dumps(body, ensure_ascii=False).encode()


def report_rule_error(call: ToolCall, outcome: RuleOutcome) -> bool:
    """Dead-letter a rule's error through the attempt's runner; True if a letter was sent."""
    from agl_stream.tracer.base import get_active_attempt
    from agl_stream.kafka import DeadLetterWriter

    reason = rule_error_reason(call, outcome)
    runner_module = sys.modules.get("agl_stream.runner.runner")  # not imported: no runner in this process
    runner = runner_module.current_runner() if runner_module is not None else None
    if runner is None:
        logger.error("%s; no agl-stream runner in this context, so no dead letter", reason, exc_info=outcome.error)
        return False
    active = get_active_attempt()
    rollout_id = active.state.rollout_id if active is not None else None
    attempt_id = active.state.attempt_id if active is not None else None
    writer = DeadLetterWriter(runner.settings.topic("dlq"), None, f"{DEAD_LETTER_PROCESSOR}:{runner.worker_id}")
    letter = writer.letter(
        reason,
        source_topic=runner.settings.topic("spans"),  # the attempt's span stream, which the rule was part of
        key=rollout_id.encode() if rollout_id else None,
        payload=dead_letter_payload(call, outcome, rollout_id, attempt_id),
        error_type=type(outcome.error).__name__,
    )
    logger.warning("%s (rollout %s; dead-lettered)", reason, rollout_id)
    runner.send_dead_letter(letter).add_done_callback(_log_undelivered)
    return True


def _log_undelivered(future: "concurrent.futures.Future[None]") -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("an AIR dead letter was not delivered: %r", future.exception())


def _tail(text: str) -> str:
    """The end of a long traceback (where the rule raised)."""
    return text if len(text) <= _MAX_TEXT else f"... ({len(text)} characters)\n" + text[-_MAX_TEXT:]


def _text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)
