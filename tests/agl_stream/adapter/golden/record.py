"""Record the golden parity corpus with Agent Lightning 0.3.0's own code (run by the side venv's python).

Not imported by agl-stream or its tests: ``generate.py`` runs this file with the python of a venv
that has ``agentlightning==0.3.0`` installed, once per recording process::

    <side-venv>/bin/python record.py --process agentops --out part.json

Each process records a set of cases. A case is one rollout run by upstream's ``LitAgentRunner``
(``runner.step``) with upstream's tracer (``AgentOpsTracer`` with a real ``openai`` client,
``OtelTracer``, or ``OtelTracer`` plus upstream's ``LLMProxy``) against a local vLLM-like server;
its spans are read back from upstream's ``InMemoryLightningStore`` (``query_spans``: the spans
and sequence ids exactly as upstream stores them) and derived with upstream's own functions and
adapters. Tracers need their own process each (each installs a global OpenTelemetry provider).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "False")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_vllm import DUPLICATE_ID_MODEL, FakeVllm  # noqa: E402

import agentlightning as agl  # noqa: E402
import openai  # noqa: E402
from agentlightning.adapter.triplet import LlmProxyTraceToTriplet, RewardMatchPolicy, TracerTraceToTriplet  # noqa: E402
from agentlightning.adapter.messages import TraceToMessages  # noqa: E402
from agentlightning.emitter.reward import (  # noqa: E402
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
)
from agentlightning.semconv import LightningResourceAttributes  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.types import Span  # noqa: E402
from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry import trace as trace_api  # noqa: E402

SEQUENCE_KEY = LightningResourceAttributes.SPAN_SEQUENCE_ID.value
LLM_SPAN = "openai.chat.completion"
TICK_SECONDS = 0.003  # between steps, so no two events share a timestamp after float/ns conversions

# ---------------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    process: str
    shapes: list[str]
    description: str
    agent: Callable[["Ctx"], Optional[float]]
    agent_matches: list[Optional[str]] = field(default_factory=lambda: [None])
    llm_call_matches: list[str] = field(default_factory=lambda: [r"openai\.chat\.completion"])


CASES: list[Case] = []


def case(
    process: str,
    shapes: list[str],
    agent_matches: Optional[list[Optional[str]]] = None,
    llm_call_matches: Optional[list[str]] = None,
) -> Callable[[Callable[["Ctx"], Optional[float]]], Callable[["Ctx"], Optional[float]]]:
    def register(fn: Callable[["Ctx"], Optional[float]]) -> Callable[["Ctx"], Optional[float]]:
        CASES.append(
            Case(
                name=fn.__name__,
                process=process,
                shapes=shapes,
                description=" ".join((fn.__doc__ or "").split()),
                agent=fn,
                agent_matches=agent_matches or [None],
                llm_call_matches=llm_call_matches or [r"openai\.chat\.completion"],
            )
        )
        return fn

    return register


class Ctx:
    """What an agent of the corpus gets: the LLM resource, an OpenAI client, an OpenTelemetry tracer."""

    def __init__(self, llm: agl.LLM, otel: trace_api.Tracer) -> None:
        self.llm = llm
        self.client = openai.OpenAI(base_url=llm.endpoint, api_key="golden", max_retries=0)
        self.otel = otel

    def chat(self, content: str, *, model: Optional[str] = None, **kwargs: Any) -> Any:
        """A real chat completion through the openai client (AgentOps instruments it when active)."""
        messages = kwargs.pop("messages", None) or [{"role": "user", "content": content}]
        return self.client.chat.completions.create(model=model or self.llm.model, messages=messages, **kwargs)

    def otel_chat(
        self,
        content: str,
        *,
        span: Optional[Any] = None,
        context: Optional[Any] = None,
        response_id: Optional[bool] = True,
        name: str = LLM_SPAN,
    ) -> Any:
        """An LLM call recorded as an OpenTelemetry GenAI span (``gen_ai.*`` plus vLLM token ids).

        ``span``: fill an already started span (the caller ends it); else a new span is started
        (under ``context`` if given) and ended here. ``response_id=False`` leaves the id out.
        """
        own = span is None
        if own:
            span = self.otel.start_span(name, context=context, kind=trace_api.SpanKind.CLIENT)
        try:
            response = self.chat(content)
            choice = response.choices[0]
            attributes: dict[str, Any] = {
                "gen_ai.system": "openai",
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self.llm.model,
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": content,
                "gen_ai.response.model": response.model,
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": choice.message.content,
                "gen_ai.completion.0.finish_reason": choice.finish_reason,
                "gen_ai.usage.prompt_tokens": response.usage.prompt_tokens,
                "gen_ai.usage.completion_tokens": response.usage.completion_tokens,
                "prompt_token_ids": list(response.prompt_token_ids),
                "response_token_ids": list(choice.token_ids),
            }
            if response_id:
                attributes["gen_ai.response.id"] = response.id
            span.set_attributes(attributes)
            return response
        finally:
            if own:
                span.end()

    def agent_span(self, name: str) -> Any:
        """An agent span as the OpenAI Agents SDK marks it (``agent.name``), made current."""
        return self.otel.start_as_current_span(f"agent {name}", attributes={"agent.name": name})


def tick() -> None:
    time.sleep(TICK_SECONDS)


# ---- AgentOpsTracer: real openai client instrumented by AgentOps ------------------------------------


@case("agentops", ["llm_agentops_shaped", "multiple_llm_calls", "reward_intermediate", "reward_final", "several_trace_ids"])
def agentops_intermediate_then_final(ctx: Ctx) -> Optional[float]:
    """Two calls, a reward after each, and the agent returns the final reward 1.0 (the runner adds
    it as a root span of its own trace). Issue 13's case: the last call earns 0.9, not 1.0."""
    ctx.chat("plan")
    tick()
    agl.emit_reward(0.5)
    tick()
    ctx.chat("solve")
    tick()
    agl.emit_reward(0.9)
    tick()
    return 1.0


@case("agentops", ["llm_agentops_shaped", "reward_none"])
def agentops_no_reward(ctx: Ctx) -> Optional[float]:
    """One call and no reward at all."""
    ctx.chat("hello")
    return None


def _agentops_decorators() -> Any:
    from agentops.sdk.decorators import agent, tool

    return agent, tool


@case(
    "agentops",
    ["llm_agentops_shaped", "nested_agents", "multiple_llm_calls", "reward_intermediate", "reward_final"],
    agent_matches=[None, "writer", "checker", "writer|checker", "^main$", "nobody"],
)
def agentops_nested_agents(ctx: Ctx) -> Optional[float]:
    """AgentOps ``@agent`` functions: main -> writer (one call) and checker (a call and a retry), a
    reward after each sub-agent, final reward returned."""
    agent, _tool = _agentops_decorators()

    @agent(name="writer")
    def writer() -> None:
        ctx.chat("write the query")
        tick()

    @agent(name="checker")
    def checker() -> None:
        ctx.chat("check the query")
        tick()
        ctx.chat("check again")
        tick()

    @agent(name="main")
    def main() -> None:
        writer()
        tick()
        agl.emit_reward(0.3)
        tick()
        checker()
        tick()
        agl.emit_reward(0.8)
        tick()

    main()
    return 1.0


@case("agentops", ["llm_agentops_shaped", "streaming_call", "reward_during_call", "reward_intermediate", "reward_final"])
def agentops_streaming(ctx: Ctx) -> Optional[float]:
    """A streamed call with a reward emitted while the stream is still open, a plain call, then a
    fully consumed stream and a final reward."""
    stream = ctx.chat("stream one", stream=True)
    first = next(iter(stream))
    tick()
    agl.emit_reward(0.2)  # the streamed call has not ended yet
    tick()
    "".join([first.choices[0].delta.content or ""] + [c.choices[0].delta.content or "" for c in stream if c.choices])
    tick()
    ctx.chat("plain")
    tick()
    agl.emit_reward(0.6)
    tick()
    "".join(c.choices[0].delta.content or "" for c in ctx.chat("stream two", stream=True) if c.choices)
    tick()
    return 0.7


@case("agentops", ["llm_agentops_shaped", "reward_before_any_call", "reward_multi_dimensional", "reward_intermediate"])
def agentops_reward_first_and_multidimensional(ctx: Ctx) -> Optional[float]:
    """A reward before any call, then multi-dimensional rewards (the primary key first)."""
    agl.emit_reward(0.1)
    tick()
    ctx.chat("first")
    tick()
    agl.emit_reward({"accuracy": 0.8, "format": 1.0}, primary_key="accuracy")
    tick()
    ctx.chat("second")
    tick()
    agl.emit_reward({"accuracy": 0.4, "length": 0.25}, primary_key="length")
    tick()
    return None


@case("agentops", ["llm_agentops_shaped", "duplicated_response_ids", "nested_llm_calls", "reward_intermediate"])
def agentops_duplicated_response_ids(ctx: Ctx) -> Optional[float]:
    """Two calls that report one response id, then a call instrumented twice (an OpenTelemetry
    wrapper span around AgentOps' own span, both carrying the same response id)."""
    ctx.chat("first", model=DUPLICATE_ID_MODEL)
    tick()
    agl.emit_reward(0.4)
    tick()
    ctx.chat("second", model=DUPLICATE_ID_MODEL)
    tick()
    agl.emit_reward(0.5)
    tick()
    with ctx.otel.start_as_current_span(LLM_SPAN) as wrapper:
        response = ctx.chat("wrapped")
        wrapper.set_attributes({
            "gen_ai.response.id": response.id,
            "prompt_token_ids": list(response.prompt_token_ids),
            "response_token_ids": list(response.choices[0].token_ids),
        })  # fmt: skip
        tick()
    tick()
    agl.emit_reward(0.6)
    tick()
    return None


@case("agentops", ["llm_agentops_shaped", "tool_calls", "multiple_llm_calls", "reward_final"])
def agentops_tool_calls(ctx: Ctx) -> Optional[float]:
    """A call offered a tool answers with a tool call, the AgentOps ``@tool`` runs, and a second
    call sees the assistant tool call and the tool result."""
    _agent, tool = _agentops_decorators()
    tools = [{"type": "function", "function": {"name": "lookup", "description": "look a number up",
                                               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]  # fmt: skip

    @tool(name="lookup")
    def lookup(x: int) -> int:
        return 2 * x

    messages: list[dict[str, Any]] = [{"role": "system", "content": "use tools"}, {"role": "user", "content": "double 3"}]
    first = ctx.chat("", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    tick()
    result = lookup(json.loads(call.function.arguments)["x"])
    tick()
    messages += [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": str(result)},
    ]  # fmt: skip
    ctx.chat("", messages=messages, tools=tools)
    tick()
    return 1.0


@case("agentops", ["llm_agentops_shaped", "reward_legacy_agentops", "reward_legacy_annotation", "llm_call_in_reward"])
def agentops_legacy_rewards(ctx: Ctx) -> Optional[float]:
    """Upstream's deprecated ``@reward`` decorator under AgentOps (a task span whose output is
    ``{"type": "reward", "value": 0.75}``) with an LLM-as-judge call inside it, and a v0.2-style
    annotation ``{"reward": 0.3}``."""
    from agentlightning.emitter.reward import reward

    ctx.chat("answer")
    tick()

    @reward
    def judge() -> float:
        ctx.chat("judge the answer")
        tick()
        return 0.75

    judge()
    tick()
    ctx.chat("answer again")
    tick()
    agl.emit_annotation({"reward": 0.3})
    tick()
    return None


@case("agentops", ["llm_agentops_shaped", "logprobs", "operation", "annotation", "reward_final"],
      llm_call_matches=[r"openai\.chat\.completion", r"agentlightning\.operation"])  # fmt: skip
def agentops_operations_and_emitters(ctx: Ctx) -> Optional[float]:
    """``operation`` as a context manager around a call with logprobs, an ``@operation`` function
    returning a completion, messages, objects, tags and a reward linked to a response id."""
    from agentlightning.utils.otel import make_link_attributes, make_tag_attributes

    with agl.operation(tool_name="calculator") as op:
        op.set_input(a=1, b=2)
        response = ctx.chat("add", logprobs=True)
        op.set_output({"sum": 3})
    tick()

    @agl.operation
    def complete(prompt: str) -> dict[str, Any]:
        return ctx.chat(prompt).model_dump()

    complete("via operation")
    tick()
    agl.emit_message("thinking")
    agl.emit_object({"plan": [1, 2]})
    tick()
    agl.emit_annotation(make_tag_attributes(["fast", "tested"]))
    tick()
    agl.emit_reward(0.5, attributes=make_link_attributes({"gen_ai.response.id": response.id}))
    tick()
    return 0.9


# ---- OtelTracer: LLM calls as OpenTelemetry GenAI spans -----------------------------------------


@case(
    "otel",
    ["llm_otel_shaped", "nested_agents", "multiple_llm_calls", "reward_intermediate", "reward_final"],
    agent_matches=[None, "write", "check", "write|check", "^main$"],
)
def otel_nested_agents(ctx: Ctx) -> Optional[float]:
    """main -> write (one call) and check (two calls), rewards inside main after each agent."""
    with ctx.agent_span("main"):
        with ctx.agent_span("write"):
            ctx.otel_chat("write")
            tick()
        tick()
        agl.emit_reward(0.4)
        tick()
        with ctx.agent_span("check"):
            ctx.otel_chat("check")
            tick()
            ctx.otel_chat("check again")
            tick()
        tick()
        agl.emit_reward(0.7)
        tick()
    return 1.0


@case("otel", ["llm_otel_shaped", "several_trace_ids", "reward_intermediate", "reward_sibling_positions"],
      agent_matches=[None, "inner"])  # fmt: skip
def otel_several_traces(ctx: Ctx) -> Optional[float]:
    """Three turns, each its own root span and trace id: a reward outside the turn, a reward as the
    call's sibling, and a reward as the sibling of the agent holding the call."""
    with ctx.agent_span("turn"):
        ctx.otel_chat("turn one")
        tick()
    tick()
    agl.emit_reward(0.2)  # a root span of its own trace
    tick()
    with ctx.agent_span("turn"):
        ctx.otel_chat("turn two")
        tick()
        agl.emit_reward(0.6)
        tick()
    tick()
    with ctx.agent_span("turn"):
        with ctx.agent_span("inner"):
            ctx.otel_chat("turn three")
            tick()
        tick()
        agl.emit_reward(0.9)
        tick()
    return None


@case("otel", ["llm_otel_shaped", "lost_parent_link", "several_trace_ids", "reward_intermediate", "reward_final"],
      agent_matches=[None, "write", "check"])  # fmt: skip
def otel_lost_parent_link(ctx: Ctx) -> Optional[float]:
    """An LLM span started with an empty context inside the ``write`` agent (its own trace, no
    parent: what repair_hierarchy fixes), then a normally nested call inside ``check``."""
    with ctx.agent_span("write"):
        tick()
        ctx.otel_chat("orphan", context=otel_context.Context())
        tick()
    tick()
    agl.emit_reward(0.5)
    tick()
    with ctx.agent_span("check"):
        ctx.otel_chat("nested")
        tick()
    tick()
    agl.emit_reward(0.8)
    tick()
    return 1.0


@case("otel", ["llm_otel_shaped", "missing_parent", "reward_intermediate"])
def otel_missing_parent(ctx: Ctx) -> Optional[float]:
    """Every span hangs under a session span that never ends, so it is never exported (the lost
    top-level span upstream's TraceTree replaces by a placeholder)."""
    session = ctx.otel.start_span("session")
    with trace_api.use_span(session, end_on_exit=False):
        with ctx.agent_span("worker"):
            ctx.otel_chat("inside the agent")
            tick()
        tick()
        agl.emit_reward(0.5)
        tick()
        ctx.otel_chat("directly in the session")
        tick()
        agl.emit_reward(0.8)
        tick()
    return None


@case("otel", ["llm_otel_shaped", "overlapping_calls", "reward_intermediate", "reward_final"])
def otel_overlapping_calls(ctx: Ctx) -> Optional[float]:
    """Two LLM spans that overlap: A starts first, B starts later and ends first (end order differs
    from start order, as with concurrent calls); then a reward, a third call and a final reward."""
    with ctx.agent_span("main"):
        a = ctx.otel.start_span(LLM_SPAN, kind=trace_api.SpanKind.CLIENT)
        tick()
        b = ctx.otel.start_span(LLM_SPAN, kind=trace_api.SpanKind.CLIENT)
        ctx.otel_chat("b", span=b)
        tick()
        b.end()
        tick()
        ctx.otel_chat("a", span=a)
        tick()
        a.end()
        tick()
        agl.emit_reward(0.5)
        tick()
        ctx.otel_chat("c")
        tick()
    return 0.9


@case("otel", ["llm_otel_shaped", "nested_llm_calls", "duplicated_response_ids", "reward_intermediate"])
def otel_nested_llm_calls(ctx: Ctx) -> Optional[float]:
    """LLM spans inside LLM spans: one id twice (inner is the duplicate), an outer span without an
    id around an inner one with an id, and an outer span with an id around an inner one without."""
    with ctx.agent_span("main"):
        with ctx.otel.start_as_current_span(LLM_SPAN) as outer:
            response = ctx.otel_chat("same id inside")
            outer.set_attributes({
                "gen_ai.response.id": response.id,
                "prompt_token_ids": list(response.prompt_token_ids),
                "response_token_ids": list(response.choices[0].token_ids),
            })  # fmt: skip
            tick()
        tick()
        agl.emit_reward(0.3)
        tick()
        with ctx.otel.start_as_current_span(LLM_SPAN) as outer:
            ctx.otel_chat("outer has no id", span=outer, response_id=False)
            ctx.otel_chat("inner has an id")
            tick()
        tick()
        agl.emit_reward(0.6)
        tick()
        with ctx.otel.start_as_current_span(LLM_SPAN) as outer:
            ctx.otel_chat("outer has an id", span=outer)
            ctx.otel_chat("inner has no id", response_id=False)
            tick()
        tick()
        agl.emit_reward(0.9)
        tick()
    return None


# ---- LLMProxy: LiteLLM proxy spans (raw_gen_ai_request / litellm_request) -------------------------


@case("proxy", ["llm_proxy_shaped", "multiple_llm_calls", "reward_intermediate", "reward_final", "several_trace_ids"])
def proxy_calls_and_rewards(ctx: Ctx) -> Optional[float]:
    """Two calls through upstream's LLMProxy, a reward after each, and a returned final reward."""
    ctx.chat("plan")
    tick()
    agl.emit_reward(0.5)
    tick()
    ctx.chat("solve")
    tick()
    agl.emit_reward(0.9)
    tick()
    return 1.0


@case("proxy", ["llm_proxy_shaped", "reward_before_any_call", "duplicated_response_ids", "streaming_via_proxy",
                "reward_multi_dimensional"])  # fmt: skip
def proxy_duplicates_and_streaming(ctx: Ctx) -> Optional[float]:
    """A reward before any call, two proxied calls reporting one response id, a multi-dimensional
    reward, and a streamed call through the proxy (which, as upstream documents, turns it into a
    plain call upstream of LiteLLM, so its spans record a non-streaming call)."""
    agl.emit_reward(0.1)
    tick()
    ctx.chat("first", model=DUPLICATE_ID_MODEL)
    tick()
    ctx.chat("second", model=DUPLICATE_ID_MODEL)
    tick()
    agl.emit_reward({"accuracy": 0.7, "format": 0.5}, primary_key="accuracy")
    tick()
    "".join(c.choices[0].delta.content or "" for c in ctx.chat("streamed", stream=True) if c.choices)
    tick()
    return None


# ---------------------------------------------------------------------------------------------- derivations


def _json(value: Any) -> Any:
    """JSON-safe copy (tuples to lists, pydantic models dumped)."""
    return json.loads(json.dumps(value, default=lambda v: v.model_dump(mode="json") if hasattr(v, "model_dump") else str(v)))


def _body(triplet: Any) -> dict[str, Any]:
    """An upstream triplet without what depends on matching (reward, agent name)."""
    dumped = _json(triplet.model_dump())
    dumped.pop("reward", None)
    dumped["metadata"].pop("agent_name", None)
    return dumped


def derive(spans: list[Span], case_: Case) -> dict[str, Any]:
    """Every derivation upstream makes from one attempt's spans, in the order given."""
    out: dict[str, Any] = {}
    reward_spans = find_reward_spans(spans)
    out["final_reward"] = find_final_reward(spans)
    out["reward_list"] = [get_reward_value(s) for s in reward_spans]
    out["reward_dimensions"] = [[r.model_dump() for r in get_rewards_from_span(s)] for s in reward_spans]
    out["reward_span_ids"] = [s.span_id for s in reward_spans]

    bodies: list[dict[str, Any]] = []
    configs: list[dict[str, Any]] = []
    for llm_call_match in case_.llm_call_matches:
        for policy in (RewardMatchPolicy.FIRST_OCCURRENCE, RewardMatchPolicy.FIRST_SIBLING):
            for agent_match in case_.agent_matches:
                for repair in (True, False):
                    adapter = TracerTraceToTriplet(
                        repair_hierarchy=repair, llm_call_match=llm_call_match, agent_match=agent_match, reward_match=policy
                    )
                    rows = []
                    for triplet in adapter.adapt(spans):
                        body = _body(triplet)
                        if body not in bodies:
                            bodies.append(body)
                        rows.append([bodies.index(body), triplet.reward, triplet.metadata.get("agent_name")])
                    configs.append({"llm_call_match": llm_call_match, "reward_match": policy.value,
                                    "agent_match": agent_match, "repair_hierarchy": repair, "triplets": rows})  # fmt: skip
    out["triplet_bodies"] = bodies
    out["tracer_triplets"] = configs
    out["proxy_triplets"] = [_json(t.model_dump()) for t in LlmProxyTraceToTriplet().adapt(spans)]
    try:
        out["messages"] = _json(TraceToMessages().adapt(spans))
    except Exception as exc:  # recorded: upstream raises on some shapes, and that is part of its answer
        out["messages"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


# ---------------------------------------------------------------------------------------------- deliveries


def intrinsic_sequence(span: Span) -> bool:
    """The producer numbered this span itself: upstream's LLMProxy does (``x-sequence-id``, allocated
    by the store when the request starts) and, exporting over OTLP, puts the number in the resource
    as ``agentlightning.span_sequence_id``. Tracer spans are numbered by whoever receives them."""
    attributes = span.resource.attributes or {}
    return SEQUENCE_KEY in attributes or attributes.get("service.name") == "litellm"


def delivery_orders(spans: list[Span], seed: int) -> dict[str, list[int]]:
    """Arrival orders an exporter can produce, as indices into the stored list."""
    index = range(len(spans))
    shuffled = list(index)
    random.Random(seed).shuffle(shuffled)
    return {
        "creation": sorted(index, key=lambda i: (spans[i].start_time, i)),
        "end": sorted(index, key=lambda i: (spans[i].end_time, i)),
        "shuffled": shuffled,
    }


def stored_view(spans: list[Span], order: list[int], keep_sequence_ids: bool) -> list[Span]:
    """What upstream's store would hand an adapter after this delivery (its facts, not its code):
    a span without a sequence id gets the attempt counter's next value on arrival, a supplied id
    moves the counter up to it (``_sync_span_sequence_id``), ``query_spans`` sorts by sequence id
    (stable, so equal ids keep arrival order)."""
    counter = 0
    arrived: list[Span] = []
    for i in order:
        span = spans[i]
        if keep_sequence_ids or intrinsic_sequence(span):
            counter = max(counter, span.sequence_id)
            arrived.append(span)
        else:
            counter += 1
            arrived.append(span.model_copy(update={"sequence_id": counter}))
    return sorted(arrived, key=lambda s: s.sequence_id)


def per_delivery(spans: list[Span], case_: Case, canonical: dict[str, Any], orders: dict[str, list[int]]) -> dict[str, Any]:
    """Upstream's derivations for each delivery, kept only where they differ from the stored order's."""
    out: dict[str, Any] = {}
    for order_name, order in orders.items():
        for keep in (True, False):
            name = f"{order_name}/{'sequence_ids' if keep else 'no_sequence_ids'}"
            derived = derive(stored_view(spans, order, keep), case_)
            differs = {key: value for key, value in derived.items() if value != canonical[key]}
            if differs:
                out[name] = differs
    return out


# ---------------------------------------------------------------------------------------------- running


def _active_otel_tracer(tracer: Any) -> trace_api.Tracer:
    return tracer._get_tracer_provider().get_tracer("golden-agent")  # the provider upstream's tracer exports from


async def record(process: str, seed: int) -> list[dict[str, Any]]:
    cases = [c for c in CASES if c.process == process]
    store = InMemoryLightningStore(thread_safe=True)
    tracer: Any = agl.AgentOpsTracer() if process == "agentops" else agl.OtelTracer()
    runner = agl.LitAgentRunner(tracer)
    by_name = {c.name: c for c in cases}

    @agl.rollout
    def dispatch(task: dict[str, Any], llm: agl.LLM) -> Optional[float]:
        return by_name[task["case"]].agent(Ctx(llm, _active_otel_tracer(tracer)))

    recorded: list[dict[str, Any]] = []
    with FakeVllm() as server:
        proxy = None
        if process == "proxy":
            models = [{"model_name": name, "litellm_params": {"model": f"hosted_vllm/{name}", "api_base": server.base_url}}
                      for name in ("m", DUPLICATE_ID_MODEL)]  # fmt: skip
            proxy = agl.LLMProxy(model_list=models, store=store, launch_mode="thread", host="127.0.0.1")
            await proxy.start()
        runner.init(dispatch)
        runner.init_worker(0, store)
        try:
            for k, case_ in enumerate(cases):
                llm = proxy.as_resource(model="m") if proxy is not None else agl.LLM(endpoint=server.base_url, model="m")
                rollout = await runner.step({"case": case_.name}, resources={"llm": llm})
                if proxy is not None:
                    await asyncio.sleep(1.0)  # the proxy exports its spans after answering
                spans = list(await store.query_spans(rollout.rollout_id, attempt_id="latest"))
                if not spans:
                    raise RuntimeError(f"{case_.name}: upstream stored no spans")
                canonical = derive(spans, case_)
                orders = delivery_orders(spans, seed + k)
                recorded.append({
                    "name": case_.name,
                    "description": case_.description,
                    "recorded_with": {"agentops": "AgentOpsTracer + openai client (AgentOps instrumentation)",
                                      "otel": "OtelTracer; LLM spans via the OpenTelemetry API (gen_ai.*)",
                                      "proxy": "OtelTracer + LLMProxy (LiteLLM, thread mode)"}[process],
                    "shapes": case_.shapes,
                    "agent_matches": case_.agent_matches,
                    "llm_call_matches": case_.llm_call_matches,
                    "spans": [_json(s.model_dump(mode="json")) for s in spans],
                    "intrinsic_sequence_span_ids": [s.span_id for s in spans if intrinsic_sequence(s)],
                    "orders": orders,
                    "upstream": canonical,
                    "upstream_by_delivery": per_delivery(spans, case_, canonical, orders),
                })  # fmt: skip
                print(f"recorded {case_.name}: {len(spans)} spans", file=sys.stderr)
        finally:
            runner.teardown_worker(0)
            if proxy is not None:
                await proxy.stop()
    return recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process", required=True, choices=sorted({c.process for c in CASES}))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    cases = asyncio.run(record(args.process, args.seed))
    args.out.write_text(json.dumps(cases))
    # AgentOps and LiteLLM leave non-daemon threads behind; the results are written, so leave now.
    os._exit(0)


if __name__ == "__main__":
    main()
