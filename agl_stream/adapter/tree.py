"""TraceTree: the span hierarchy of one attempt, with upstream's LLM-call and reward matching.

The rules are those of upstream's ``agentlightning.adapter.triplet.TraceTree`` (0.3.0), checked
case by case against upstream's own output by the golden parity corpus
(``tests/agl_stream/adapter/golden``). What upstream takes from the order its store returns spans
in (the order they ended, since exporters deliver spans when they end) is taken here from the
spans' end times, so the answer does not depend on how spans travelled or whether they carry
sequence ids:

* children are kept in the order they ended; roots likewise, then placeholders for parents that
  were never received (a lost session span) in the order their subtrees ended;
* LLM calls are collected depth first; ``FIRST_OCCURRENCE`` walks all nodes by start time,
  ``FIRST_SIBLING`` walks each node's children; a reward goes to the latest call (in that walk)
  that had ended when the reward started and has no reward yet (earlier calls are tried when the
  latest already has one);
* ``repair_hierarchy`` moves the root's children under the tightest other span that strictly
  envelopes them in time, appended after that span's children.

agl-stream's addition: a reward marked intermediate (``agl.reward.intermediate``, what
``agl_stream.air`` rules emit after a tool call) is left out of upstream's matching above, so it
never takes an ordinary reward's call. It goes to the latest collected LLM call that had ended when
its ``agl.reward.anchor_time`` came (the tool started; the reward's own start without one): the call
whose output requested the tool, whatever the policy, however many tools that call requested and
whatever LLM calls the tool or the rule made. Several intermediate rewards of one call add up, and
add to its ordinary reward; each triplet lists them in ``metadata["intermediate_rewards"]``.
"""

from __future__ import annotations

import bisect
import re
from enum import Enum
from typing import Any, Iterator, Optional, Sequence

from agl_stream.adapter import llm_fields
from agl_stream.adapter.rewards import (
    is_intermediate_reward,
    reward_anchor_time,
    reward_value,
    store_order,
    store_order_key,
)
from agl_stream.semconv import AGL_OPERATION, AGL_REWARD, AGL_VIRTUAL, LightningSpanAttributes
from agl_stream.types import Span, Triplet

VIRTUAL_ROOT_ID = "agentlightning-virtual-root"
#: the agent name upstream gives calls outside any agent span when ``agent_match`` is None
ANY_AGENT = "*"

#: agl-stream additions, consulted only after every attribute upstream reads (see ``agent_name``)
EXTRA_AGENT_NAME_KEYS: tuple[str, ...] = ("gen_ai.agent.name",)  # OpenTelemetry GenAI conventions


class RewardMatchPolicy(str, Enum):
    """How reward spans are attached to LLM calls."""

    FIRST_SIBLING = "first_sibling"
    """A reward goes to the latest earlier LLM call among its siblings (same parent) without a reward."""
    FIRST_OCCURRENCE = "first_occurrence"
    """A reward goes to the latest LLM call that ended before it started, anywhere, without a reward."""


class TraceTree:
    """A node of the span tree: ``id`` (span id), ``span`` and ``children`` (in the order they ended)."""

    def __init__(self, id: str, span: Span, children: Optional[list["TraceTree"]] = None) -> None:
        self.id = id
        self.span = span
        self.children: list[TraceTree] = children or []

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> "TraceTree":
        """Build the tree of one attempt.

        A span whose parent is missing hangs under a placeholder for that parent; several roots
        hang under a synthetic ``agentlightning.virtual`` root. A span delivered twice counts once.
        Raises ``ValueError`` if ``spans`` is empty.
        """
        if not spans:
            raise ValueError("cannot build a TraceTree from an empty list of spans")
        nodes: dict[str, TraceTree] = {}
        for span in store_order(spans):
            nodes.setdefault(span.span_id, cls(span.span_id, span))
        roots: list[TraceTree] = []
        placeholders: dict[str, TraceTree] = {}
        for node in nodes.values():  # store order, so every children list comes out in end order
            parent_id = node.span.parent_id
            if parent_id is None or parent_id == node.id:
                roots.append(node)
            elif parent_id in nodes:
                nodes[parent_id].children.append(node)
            else:
                placeholder = placeholders.get(parent_id)
                if placeholder is None:
                    placeholder = placeholders[parent_id] = cls(parent_id, _synthetic(parent_id, node.span))
                placeholder.children.append(node)
        for placeholder in placeholders.values():
            placeholder.span = _synthetic(placeholder.id, *(child.span for child in placeholder.children))
        roots += sorted(placeholders.values(), key=lambda p: store_order_key(p.span))
        if len(roots) == 1:
            return roots[0]
        return cls(VIRTUAL_ROOT_ID, _synthetic(VIRTUAL_ROOT_ID, *(root.span for root in roots)), roots)

    def repair_hierarchy(self) -> None:
        """Re-parent the root's children under the tightest other span that envelopes them in time.

        Tracers lose parent links (threads, separate trace ids, instrumented libraries that start
        their own roots); an LLM call that happened *during* an agent span belongs to that agent.
        A root with a single child (e.g. AgentOps' session span) repairs that child instead.
        """
        if len(self.children) == 1:
            self.children[0].repair_hierarchy()
            return
        walk: Optional[list[TraceTree]] = None  # the tree in pre-order; it changes only when a node moves
        for node in list(self.children):
            if len(self.children) == 1:
                break
            start, end = node.span.start_time, node.span.end_time
            if start is None or end is None:
                continue
            own = {id(n) for n in node.traverse()}  # never under itself or its own descendants
            best: Optional[TraceTree] = None
            best_slack = float("inf")
            if walk is None:
                walk = list(self.traverse())
            for candidate in walk:
                if candidate is self or id(candidate) in own:
                    continue
                c_start, c_end = candidate.span.start_time, candidate.span.end_time
                if c_start is None or c_end is None or c_start > start or c_end < end:
                    continue
                slack = (c_end - end) + (start - c_start)
                if 0 < slack < best_slack:
                    best, best_slack = candidate, slack
            if best is not None:
                self.children.remove(node)
                best.children.append(node)
                walk = None

    # ------------------------------------------------------------------ inspection

    @property
    def start_time(self) -> float:
        return self.span.start_time if self.span.start_time is not None else 0.0

    @property
    def end_time(self) -> float:
        return self.span.end_time if self.span.end_time is not None else self.start_time

    def traverse(self) -> Iterator["TraceTree"]:
        """Pre-order walk: a node, then each child's subtree in order."""
        stack: list[TraceTree] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def agent_name(self) -> Optional[str]:
        """The agent this span stands for, read as upstream does (first match wins):
        ``agent.name`` (OpenAI Agents SDK), AgentOps ``@agent`` (``operation.name``),
        ``recipient_agent_type`` (AutoGen), ``langchain.chain.type``, ``executor.id`` (Agent
        Framework), Weave agents (``agentlightning.operation.input.name``), Weave LangChain chains
        (``lc_name``); then agl-stream's additions (``gen_ai.agent.name``)."""
        attrs = self.span.attributes
        candidates: list[Any] = [attrs.get("agent.name")]
        if attrs.get("agentops.span.kind") == "agent":
            candidates.append(attrs.get("operation.name"))
        candidates += [attrs.get("recipient_agent_type"), attrs.get("langchain.chain.type"), attrs.get("executor.id")]
        if attrs.get("type") == "agent":
            candidates.append(attrs.get(f"{LightningSpanAttributes.OPERATION_INPUT.value}.name"))
        if self.span.name.startswith("langchain.Chain."):
            candidates.append(attrs.get("lc_name"))
        candidates += [attrs.get(key) for key in EXTRA_AGENT_NAME_KEYS]
        found = next((value for value in candidates if value is not None), None)
        return None if found is None else str(found)

    def reward(self) -> Optional[float]:
        """The primary reward this span carries, if it is a reward span."""
        return reward_value(self.span.name, self.span.attributes)

    def maybe_reward_dict(self) -> dict[str, Any]:
        """Upstream's view: ``{"type": "reward", "value": x}`` for a reward span, else ``{}``."""
        value = self.reward()
        return {"type": "reward", "value": value} if value is not None else {}

    def is_reward_span(self) -> bool:
        """A reward span, or an ``operation`` span named ``agentlightning.reward`` (its LLM calls are
        the reward computation, not the agent's)."""
        if self.reward() is not None:
            return True
        attrs = self.span.attributes
        return self.span.name == AGL_OPERATION and attrs.get(LightningSpanAttributes.OPERATION_NAME.value) == AGL_REWARD

    def names_tuple(self) -> tuple[str, list[Any]]:
        """``(name [agent], [children's names_tuple...])``: a compact shape for tests and debugging."""
        agent = self.agent_name()
        name = self.span.name if agent is None else f"{self.span.name} [{agent}]"
        return (name, [child.names_tuple() for child in self.children])

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "span": self.span.model_dump(mode="json"),
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
    ) -> list[tuple["TraceTree", str]]:
        """LLM-call nodes (depth first) with the name of the agent subtree they were found in.

        ``within_matching_subtree``: the matching agent's name (``"*"`` for "any" when
        ``agent_match`` is None); None outside matching agents, where calls are not collected. An
        agent span that does not match ``agent_match`` ends the matching subtree below it.
        ``within_reward`` / ``within_llm_call``: None disables the check, False enables it (calls
        under reward spans are skipped; under another collected call, calls without a response id
        are skipped as the same call seen twice). ``existing_llm_call_response_ids`` is shared by
        the whole walk: a response id seen once is not collected again.
        """
        found: list[tuple[TraceTree, str]] = []
        seen = existing_llm_call_response_ids if existing_llm_call_response_ids is not None else set()
        _collect_calls(self, re.compile(llm_call_match), agent_match, within_matching_subtree, within_reward,
                       within_llm_call, seen, found)  # fmt: skip
        return found

    def match_rewards(
        self, reward_match: RewardMatchPolicy | str, llm_calls: Sequence["TraceTree | tuple[TraceTree, str]"]
    ) -> dict[str, Optional[float]]:
        """Map LLM-call span ids to the reward matched to them (each call gets at most one ordinary
        reward; intermediate rewards add to it, see the module doc).

        ``llm_calls``: call nodes, or the ``(node, agent)`` pairs :meth:`find_llm_calls` returns.
        """
        return self._match_all(reward_match, [call[0] if isinstance(call, tuple) else call for call in llm_calls])[0]

    def _match_all(
        self, reward_match: RewardMatchPolicy | str, calls: Sequence["TraceTree"]
    ) -> tuple[dict[str, Optional[float]], dict[str, list[float]]]:
        """Each call's reward (ordinary plus intermediate) and its intermediate rewards alone."""
        call_ids = {call.id for call in calls}
        rewards: dict[str, Optional[float]] = {}
        policy = RewardMatchPolicy(reward_match)
        if policy is RewardMatchPolicy.FIRST_OCCURRENCE:
            _match_in_order(sorted(self.traverse(), key=lambda n: n.start_time), call_ids, rewards)
        else:
            for parent in self.traverse():
                _match_in_order(parent.children, call_ids, rewards)
        intermediate = self.match_intermediate_rewards(calls)
        for call_id, values in intermediate.items():
            rewards[call_id] = (rewards.get(call_id) or 0.0) + sum(values)
        return rewards, intermediate

    def match_intermediate_rewards(self, llm_calls: Sequence["TraceTree"]) -> dict[str, list[float]]:
        """Map LLM-call span ids to the intermediate rewards they earned, in the order the rewards started:
        each goes to the latest of ``llm_calls`` that had ended by its anchor time (see the module doc)."""
        marked = [node for node in self.traverse() if is_intermediate_reward(node.span.attributes)]
        if not marked:
            return {}
        calls = sorted(llm_calls, key=lambda n: n.end_time)
        ends = [call.end_time for call in calls]
        matched: dict[str, list[float]] = {}
        for node in sorted(marked, key=lambda n: n.start_time):
            value = node.reward()
            if value is None:
                continue
            anchor = reward_anchor_time(node.span.attributes)
            index = bisect.bisect_right(ends, node.start_time if anchor is None else anchor)
            if index:
                matched.setdefault(calls[index - 1].id, []).append(value)
        return matched

    def span_to_triplet(self, span: Span, agent_name: Optional[str]) -> Triplet:
        """The triplet of one LLM-call span, before rewards: token ids, messages, request/response."""
        attrs = span.attributes
        prompt_messages = llm_fields.prompt_messages(attrs)
        response = llm_fields.response_payload(attrs)
        response["raw_content"] = llm_fields.completion_choices(attrs)
        return Triplet(
            prompt={
                "token_ids": llm_fields.prompt_token_ids(attrs),
                "raw_content": prompt_messages,
                "image_urls": llm_fields.image_urls(prompt_messages),
            },
            response=response,
            policy_version=llm_fields.policy_version(attrs),
            metadata={
                "request": llm_fields.request_metadata(attrs),
                "response": llm_fields.response_metadata(attrs),
                "response_id": llm_fields.response_id(attrs),
                "agent_name": agent_name,
                "span_id": span.span_id,
                "sequence_id": span.sequence_id,
            },
        )

    def to_trajectory(
        self,
        llm_call_match: str = r"openai\.chat\.completion",
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        dedup_llm_call: bool = True,
        reward_match: RewardMatchPolicy = RewardMatchPolicy.FIRST_OCCURRENCE,
        final_reward: Optional[float] = None,
        _skip_empty_token_spans: bool = False,
    ) -> list[Triplet]:
        """One triplet per collected LLM call; ``final_reward``, when given, replaces the last one's reward."""
        calls = self.find_llm_calls(
            llm_call_match=llm_call_match,
            agent_match=agent_match,
            within_matching_subtree=ANY_AGENT if agent_match is None else None,
            within_reward=False if exclude_llm_call_in_reward else None,
            within_llm_call=False if dedup_llm_call else None,
            existing_llm_call_response_ids=set(),
        )
        kept: list[tuple[TraceTree, Triplet]] = []
        for node, agent in calls:
            triplet = self.span_to_triplet(node.span, agent)
            if _skip_empty_token_spans and not (triplet.prompt_token_ids and triplet.response_token_ids):
                continue  # upstream's escape hatch for anonymous calls outside the trained agent
            kept.append((node, triplet))
        rewards, intermediate = self._match_all(reward_match, [node for node, _ in kept])
        for node, triplet in kept:
            triplet.reward = rewards.get(node.id)
            if node.id in intermediate:
                triplet.metadata["intermediate_rewards"] = intermediate[node.id]
        if final_reward is not None and kept:
            kept[-1][1].reward = final_reward
        return [triplet for _, triplet in kept]


def _synthetic(span_id: str, *covered: Span) -> Span:
    """A stand-in span (virtual root or missing parent) covering ``covered`` in time."""
    first = covered[0]
    starts = [s.start_time for s in covered if s.start_time is not None]
    ends = [s.end_time for s in covered if s.end_time is not None]
    return Span(
        rollout_id=first.rollout_id,
        attempt_id=first.attempt_id,
        sequence_id=min(s.sequence_id for s in covered),
        trace_id=first.trace_id,
        span_id=span_id,
        name=AGL_VIRTUAL,
        start_time=min(starts) if starts else None,
        end_time=max(ends) if ends else None,
    )


def _match_in_order(nodes: Sequence[TraceTree], call_ids: set[str], rewards: dict[str, Optional[float]]) -> None:
    """Walk ``nodes``; each reward goes to the latest call walked so far that had ended when the
    reward started and has no reward yet."""
    ended: list[TraceTree] = []
    for node in nodes:
        if node.id in call_ids:
            ended.append(node)
        value = node.reward()
        if value is None or is_intermediate_reward(node.span.attributes):
            continue
        for call in reversed(ended):
            if call.end_time > node.start_time or call.id in rewards:
                continue
            rewards[call.id] = value
            break


def _collect_calls(
    node: TraceTree,
    call_re: "re.Pattern[str]",
    agent_match: Optional[str],
    matching_agent: Optional[str],
    within_reward: Optional[bool],
    within_llm_call: Optional[bool],
    seen_response_ids: set[str],
    found: list[tuple[TraceTree, str]],
) -> None:
    """Depth first, children in order, so ``found`` comes out in the order upstream reports calls."""
    if matching_agent is not None and within_reward is not True and call_re.search(node.span.name):
        rid = llm_fields.response_id(node.span.attributes)
        duplicate = (rid is None and within_llm_call is True) or (rid is not None and rid in seen_response_ids)
        if not duplicate:
            found.append((node, matching_agent))
            if rid is not None:
                seen_response_ids.add(rid)
            if within_llm_call is not None:
                within_llm_call = True
    agent = node.agent_name()
    if agent is not None:
        matching_agent = agent if agent_match is None or re.search(agent_match, agent) else None
    if within_reward is not None and node.is_reward_span():
        within_reward = True
    for child in node.children:
        _collect_calls(child, call_re, agent_match, matching_agent, within_reward, within_llm_call,
                       seen_response_ids, found)  # fmt: skip
