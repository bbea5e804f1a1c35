"""TraceTree: the span hierarchy of one attempt, with upstream's LLM-call and reward matching.

Upstream (``agentlightning.adapter.triplet.TraceTree``) builds one tree per attempt: several root
spans (one rollout may produce several trace ids) hang under a synthetic
``agentlightning.virtual`` root. LLM calls are spans whose name matches ``llm_call_match``; rewards
are annotation spans, matched to LLM calls by :class:`RewardMatchPolicy`.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Iterator, Optional, Sequence

from agl_stream.adapter import llm_fields
from agl_stream.adapter.base import span_order_key
from agl_stream.adapter.rewards import reward_dict
from agl_stream.semconv import AGL_VIRTUAL
from agl_stream.types import Span, Triplet

VIRTUAL_ROOT_ID = "agentlightning-virtual-root"

#: attributes that name the agent a span belongs to, in lookup order (one per framework)
AGENT_NAME_KEYS: tuple[str, ...] = (
    "agent.name",  # OpenAI Agents SDK, agl-stream SDK
    "gen_ai.agent.name",  # OpenTelemetry GenAI conventions
    "recipient_agent_type",  # AutoGen teams
    "langchain.chain.type",  # LangGraph / LangChain
    "executor.id",  # Microsoft Agent Framework
)


class RewardMatchPolicy(str, Enum):
    """How reward spans are attached to LLM calls."""

    FIRST_SIBLING = "first_sibling"
    """A reward goes to the latest LLM call among its earlier siblings (same parent), if that has none yet."""
    FIRST_OCCURRENCE = "first_occurrence"
    """A reward goes to the latest LLM call that ended before it started, anywhere in the tree, if that has none yet."""


class TraceTree:
    """A node of the span tree: ``id`` (span id), ``span`` and time-ordered ``children``."""

    def __init__(self, id: str, span: Span, children: Optional[list["TraceTree"]] = None) -> None:
        self.id = id
        self.span = span
        self.children: list[TraceTree] = children or []

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> "TraceTree":
        """Build the tree of one attempt; several roots get a synthetic ``agentlightning.virtual`` root.

        A span whose parent is not among ``spans`` counts as a root. Raises ``ValueError`` if empty.
        """
        if not spans:
            raise ValueError("cannot build a TraceTree from an empty list of spans")
        ordered = sorted(spans, key=span_order_key)
        nodes: dict[str, TraceTree] = {}
        for span in ordered:
            if span.span_id not in nodes:  # a span delivered twice (at-least-once) counts once
                nodes[span.span_id] = cls(span.span_id, span)
        roots: list[TraceTree] = []
        for node in nodes.values():
            parent = nodes.get(node.span.parent_id) if node.span.parent_id else None
            if parent is None or parent is node:
                roots.append(node)
            else:
                parent.children.append(node)
        for node in nodes.values():
            node.children.sort(key=_node_order_key)
        if len(roots) == 1:
            return roots[0]
        first = ordered[0]
        starts = [s.start_time for s in ordered if s.start_time is not None]
        ends = [s.end_time for s in ordered if s.end_time is not None]
        virtual = Span(
            rollout_id=first.rollout_id,
            attempt_id=first.attempt_id,
            sequence_id=min(s.sequence_id for s in ordered),
            trace_id=first.trace_id,
            span_id=VIRTUAL_ROOT_ID,
            name=AGL_VIRTUAL,
            start_time=min(starts) if starts else None,
            end_time=max(ends) if ends else None,
        )
        return cls(VIRTUAL_ROOT_ID, virtual, sorted(roots, key=_node_order_key))

    def repair_hierarchy(self) -> None:
        """Re-parent the root's children under the tightest other span that envelopes them in time.

        Tracers lose parent links (threads, separate trace ids, instrumented libraries that start
        their own roots); an LLM call that happened *during* an agent span belongs to that agent.
        """
        for node in list(self.children):
            if len(self.children) <= 1:
                break
            if node.span.start_time is None or node.span.end_time is None:
                continue
            excluded = {id(n) for n in node.traverse()}
            best: Optional[TraceTree] = None
            best_duration = float("inf")
            for candidate in self.traverse():
                if candidate is self or id(candidate) in excluded:
                    continue
                start, end = candidate.span.start_time, candidate.span.end_time
                if start is None or end is None:
                    continue
                if start <= node.span.start_time and node.span.end_time <= end and end - start < best_duration:
                    best, best_duration = candidate, end - start
            if best is not None:
                self.children.remove(node)
                best.children.append(node)
                best.children.sort(key=_node_order_key)

    # ------------------------------------------------------------------ inspection

    @property
    def start_time(self) -> float:
        return self.span.start_time if self.span.start_time is not None else 0.0

    @property
    def end_time(self) -> float:
        return self.span.end_time if self.span.end_time is not None else self.start_time

    def traverse(self) -> Iterator["TraceTree"]:
        """Pre-order walk (a node before its children, children in time order)."""
        stack: list[TraceTree] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def agent_name(self) -> Optional[str]:
        """The agent this span represents, if it is an agent span of a known framework."""
        attrs = self.span.attributes
        for key in AGENT_NAME_KEYS:
            value = attrs.get(key)
            if isinstance(value, str) and value:
                return value
        if attrs.get("agentops.span.kind") == "agent":
            value = attrs.get("operation.name") or attrs.get("agentops.entity.name")
            if isinstance(value, str) and value:
                return value
        return None

    def maybe_reward_dict(self) -> Optional[dict[str, float]]:
        """Named rewards of this span (primary first), or None if it is not a reward span."""
        return reward_dict(self.span.attributes, self.span.name)

    def is_reward_span(self) -> bool:
        return self.maybe_reward_dict() is not None

    def primary_reward(self) -> Optional[float]:
        rewards = self.maybe_reward_dict()
        return next(iter(rewards.values())) if rewards else None

    def names_tuple(self) -> tuple[str, list[Any]]:
        """``(name, [children's names_tuple...])``: a compact shape for tests and debugging."""
        return (self.span.name, [child.names_tuple() for child in self.children])

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.span.name,
            "start_time": self.span.start_time,
            "end_time": self.span.end_time,
            "children": [child.to_json() for child in self.children],
        }

    # ------------------------------------------------------------------ LLM calls and rewards

    def find_llm_calls(
        self,
        *,
        llm_call_match: str,
        agent_match: Optional[str],
        within_matching_subtree: Optional[str] = None,
        within_reward: Optional[bool] = None,
        within_llm_call: Optional[bool] = None,
        existing_llm_call_response_ids: Optional[set[str]] = None,
    ) -> list[tuple["TraceTree", Optional[str]]]:
        """LLM-call nodes with the name of the agent they ran under, in time order.

        ``within_matching_subtree`` is the agent name once inside a subtree whose agent matches
        ``agent_match`` (every call matches when ``agent_match`` is None). ``within_reward`` /
        ``within_llm_call``: None disables the check, False enables it (calls inside reward spans
        are skipped; calls nested inside another matched call are duplicates and skipped).
        ``existing_llm_call_response_ids`` dedups calls reported twice with the same response id.
        """
        call_re = re.compile(llm_call_match)
        agent_re = re.compile(agent_match) if agent_match is not None else None
        found: list[tuple[TraceTree, Optional[str]]] = []
        _collect_calls(
            self, call_re, agent_re, None, within_matching_subtree, within_reward, within_llm_call,
            existing_llm_call_response_ids, found,
        )  # fmt: skip
        return found

    def match_rewards(
        self, reward_match: RewardMatchPolicy, llm_calls: Sequence[tuple["TraceTree", Optional[str]]]
    ) -> dict[str, Optional[float]]:
        """Map LLM-call span ids to the reward matched to them (each call gets at most one reward)."""
        call_ids = {node.id for node, _ in llm_calls}
        rewards: dict[str, Optional[float]] = {}
        if RewardMatchPolicy(reward_match) is RewardMatchPolicy.FIRST_OCCURRENCE:
            ended: list[TraceTree] = []
            for node in sorted(self.traverse(), key=_node_order_key):
                if node.id in call_ids:
                    ended.append(node)
                value = node.primary_reward()
                if value is None:
                    continue
                for call in reversed(ended):
                    if call.end_time > node.start_time:
                        continue  # still running when the reward was emitted
                    if call.id not in rewards:
                        rewards[call.id] = value
                    break
        else:
            for parent in self.traverse():
                earlier: list[TraceTree] = []
                for child in parent.children:
                    if child.id in call_ids:
                        earlier.append(child)
                    value = child.primary_reward()
                    if value is not None and earlier and earlier[-1].id not in rewards:
                        rewards[earlier[-1].id] = value
        return rewards

    def to_trajectory(
        self,
        llm_call_match: str = r"openai\.chat\.completion",
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        dedup_llm_call: bool = True,
        reward_match: RewardMatchPolicy = RewardMatchPolicy.FIRST_OCCURRENCE,
        final_reward: Optional[float] = None,
    ) -> list[Triplet]:
        """One triplet per matched LLM call, in time order; ``final_reward`` overrides the last one's reward."""
        calls = self.find_llm_calls(
            llm_call_match=llm_call_match,
            agent_match=agent_match,
            within_reward=False if exclude_llm_call_in_reward else None,
            within_llm_call=False if dedup_llm_call else None,
            existing_llm_call_response_ids=set() if dedup_llm_call else None,
        )
        rewards = self.match_rewards(reward_match, calls)
        triplets: list[Triplet] = []
        for node, agent in calls:
            attrs = node.span.attributes
            triplets.append(
                Triplet(
                    prompt={"token_ids": llm_fields.prompt_token_ids(attrs)},
                    response=llm_fields.response_payload(attrs),
                    reward=rewards.get(node.id),
                    policy_version=llm_fields.policy_version(attrs),
                    metadata={
                        "response_id": llm_fields.response_id(attrs),
                        "agent_name": agent,
                        "span_id": node.id,
                        "sequence_id": node.span.sequence_id,
                    },
                )
            )
        if final_reward is not None and triplets:
            triplets[-1].reward = final_reward
        return triplets


def _node_order_key(node: TraceTree) -> tuple[float, int, str]:
    return (node.start_time, node.span.sequence_id, node.id)


def _collect_calls(
    node: TraceTree,
    call_re: "re.Pattern[str]",
    agent_re: Optional["re.Pattern[str]"],
    nearest_agent: Optional[str],
    matching_agent: Optional[str],
    within_reward: Optional[bool],
    within_llm_call: Optional[bool],
    seen_response_ids: Optional[set[str]],
    found: list[tuple[TraceTree, Optional[str]]],
) -> None:
    """Depth-first, children in time order, so ``found`` comes out in time order."""
    name = node.agent_name()
    if name is not None:
        nearest_agent = name
        if agent_re is not None and agent_re.search(name):
            matching_agent = name
    in_scope = agent_re is None or matching_agent is not None
    if call_re.search(node.span.name):
        skipped = bool(within_reward) or bool(within_llm_call)
        if in_scope and not skipped:
            rid = llm_fields.response_id(node.span.attributes)
            if seen_response_ids is None or rid is None or rid not in seen_response_ids:
                if seen_response_ids is not None and rid is not None:
                    seen_response_ids.add(rid)
                found.append((node, matching_agent if agent_re is not None else nearest_agent))
        if within_llm_call is not None:
            within_llm_call = True
    if within_reward is not None and node.is_reward_span():
        within_reward = True
    for child in node.children:
        _collect_calls(
            child, call_re, agent_re, nearest_agent, matching_agent, within_reward, within_llm_call,
            seen_response_ids, found,
        )  # fmt: skip
