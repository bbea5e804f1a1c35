"""``TracerTraceToTriplet``: spans of one attempt -> (prompt, response, reward) triplets with token ids.

The default adapter of upstream's Trainer and of the agl-stream triplet processor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from agl_stream.adapter.base import TraceAdapter
from agl_stream.adapter.proxy import LlmProxyTraceToTriplet  # noqa: F401  (upstream's module holds both adapters)
from agl_stream.adapter.tree import RewardMatchPolicy, TraceTree
from agl_stream.adapter.upstream import TraceToTripletBase  # noqa: F401  (upstream's base class name)
from agl_stream.types import Span, Triplet

__all__ = ["RewardMatchPolicy", "TraceTree", "TracerTraceToTriplet", "Transition"]


@dataclass
class Transition:
    """Upstream's token-level view of one LLM call: state (prompt ids) -> action (response ids)."""

    state: list[int]
    action: list[int]
    response_id: Optional[str]
    agent_name: Optional[str]
    reward: Optional[float]

    @classmethod
    def from_triplet(cls, triplet: Triplet) -> "Transition":
        return cls(
            state=triplet.prompt_token_ids,
            action=triplet.response_token_ids,
            response_id=triplet.metadata.get("response_id"),
            agent_name=triplet.metadata.get("agent_name"),
            reward=triplet.reward,
        )


class TracerTraceToTriplet(TraceAdapter[list[Triplet]]):
    """Build the attempt's TraceTree, find LLM calls, match rewards, and emit one triplet per call.

    As upstream, each call's reward is the one :class:`RewardMatchPolicy` matches to it; the final
    reward is not copied onto the last triplet (it travels as ``Trajectory.final_reward``).
    Parameters are upstream's, in upstream's order; ``dedup_llm_call`` is agl-stream's (upstream
    always deduplicates).
    """

    def __init__(
        self,
        repair_hierarchy: bool = True,
        llm_call_match: str = r"openai\.chat\.completion",
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        reward_match: RewardMatchPolicy = RewardMatchPolicy.FIRST_OCCURRENCE,
        _skip_empty_token_spans: bool = False,
        *,
        dedup_llm_call: bool = True,
    ) -> None:
        self.repair_hierarchy = repair_hierarchy
        self.llm_call_match = llm_call_match
        self.agent_match = agent_match
        self.exclude_llm_call_in_reward = exclude_llm_call_in_reward
        self.reward_match = RewardMatchPolicy(reward_match)
        self._skip_empty_token_spans = _skip_empty_token_spans
        self.dedup_llm_call = dedup_llm_call

    def to_tree(self, spans: Sequence[Span]) -> TraceTree:
        tree = TraceTree.from_spans(spans)
        if self.repair_hierarchy:
            tree.repair_hierarchy()
        return tree

    def adapt(self, source: Sequence[Span]) -> list[Triplet]:
        if not source:
            return []
        _check_single_attempt(source)
        return self.to_tree(source).to_trajectory(
            llm_call_match=self.llm_call_match,
            agent_match=self.agent_match,
            exclude_llm_call_in_reward=self.exclude_llm_call_in_reward,
            dedup_llm_call=self.dedup_llm_call,
            reward_match=self.reward_match,
            _skip_empty_token_spans=self._skip_empty_token_spans,
        )

    def __repr__(self) -> str:
        return (
            f"TracerTraceToTriplet(repair_hierarchy={self.repair_hierarchy}, llm_call_match={self.llm_call_match!r}, "
            f"agent_match={self.agent_match!r}, exclude_llm_call_in_reward={self.exclude_llm_call_in_reward}, "
            f"reward_match={self.reward_match.value!r}, dedup_llm_call={self.dedup_llm_call})"
        )


def _check_single_attempt(spans: Sequence[Span]) -> None:
    attempts = {(s.rollout_id, s.attempt_id) for s in spans}
    if len(attempts) > 1:
        raise ValueError(
            f"adapters take the spans of one attempt; got {len(attempts)} attempts "
            "(split them with agl_stream.adapter.group_spans_by_attempt)"
        )
