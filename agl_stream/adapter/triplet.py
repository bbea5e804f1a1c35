"""``TracerTraceToTriplet``: spans of one attempt -> (prompt, response, reward) triplets with token ids.

The default adapter of upstream's Trainer and of the agl-stream triplet processor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from agl_stream.adapter.base import TraceAdapter
from agl_stream.adapter.rewards import find_final_reward
from agl_stream.adapter.tree import RewardMatchPolicy, TraceTree
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

    The final reward (the last reward span of the attempt) is assigned to the last triplet, as upstream.
    """

    def __init__(
        self,
        llm_call_match: str = r"openai\.chat\.completion",
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        dedup_llm_call: bool = True,
        reward_match: RewardMatchPolicy = RewardMatchPolicy.FIRST_OCCURRENCE,
        repair_hierarchy: bool = True,
    ) -> None:
        self.llm_call_match = llm_call_match
        self.agent_match = agent_match
        self.exclude_llm_call_in_reward = exclude_llm_call_in_reward
        self.dedup_llm_call = dedup_llm_call
        self.reward_match = RewardMatchPolicy(reward_match)
        self.repair_hierarchy = repair_hierarchy

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
            final_reward=find_final_reward(source),
        )

    def __repr__(self) -> str:
        return (
            f"TracerTraceToTriplet(llm_call_match={self.llm_call_match!r}, agent_match={self.agent_match!r}, "
            f"exclude_llm_call_in_reward={self.exclude_llm_call_in_reward}, dedup_llm_call={self.dedup_llm_call}, "
            f"reward_match={self.reward_match.value!r}, repair_hierarchy={self.repair_hierarchy})"
        )


def _check_single_attempt(spans: Sequence[Span]) -> None:
    attempts = {(s.rollout_id, s.attempt_id) for s in spans}
    if len(attempts) > 1:
        raise ValueError(
            f"adapters take the spans of one attempt; got {len(attempts)} attempts "
            "(split them with agl_stream.adapter.group_spans_by_attempt)"
        )
