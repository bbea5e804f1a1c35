"""A multi-turn attempt's calls -> training rows: one row per call (``transition``) or merged (``trajectory``).

A multi-turn agent's every call repeats the conversation so far as its prompt. One row per call makes the
learner read that prefix again for each call. Trajectory aggregation (upstream v1.0's default,
``trace_aggregator.level: trajectory``) merges the calls of one attempt into one sequence:

- a call *joins* the current row when its prompt token ids start with the row's tokens so far (the previous
  call's prompt + response). The tokens between (tool results, user turns, the chat template's closing of
  the assistant turn) join the row as context: loss mask 0, behaviour log-prob 0. Its response joins with
  loss mask 1.
- a call whose prompt does not start that way is a *prefix break* (a chat template that re-renders history, a
  harness that edits its context): it starts a new row, and is counted with the first differing position.
- **length rule**: a row holds whole calls. A call that would take the row's response part (context and
  responses after the first prompt) past ``max_response_length`` starts a new row instead (a *cut*), whose
  prompt is that call's own prompt. Prompts longer than ``max_prompt_length`` keep their last tokens and a
  single response longer than ``max_response_length`` keeps its first, as one row per call does.

Each row keeps its attempt's rollout id: the advantage is computed once per rollout and the
``rollout-mean-token-mean`` loss weighs each rollout the same (``grpo.py``), however many rows it became.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Sequence

from agl_stream.types import Triplet

Aggregation = Literal["transition", "trajectory"]
#: the learner's default (``GRPOConfig.aggregation``, ``agl.VERL`` without ``trace_aggregator.level``): on both measured
#: tasks trajectory rows learned as well as a row per call at 0.26-0.65 of the tokens and 0.32-0.62 of the seconds
#: per step (docs/learning.md); upstream v1.0's default too
DEFAULT_AGGREGATION: Aggregation = "trajectory"


@dataclass(frozen=True)
class PrefixBreak:
    """A call that did not extend the previous one: where, and the first token position that differs."""

    rollout_id: str
    call_index: int  #: the call's position among its attempt's calls with a response
    position: int  #: first index where its prompt differs from the previous prompt + response
    expected_length: int  #: len(previous prompt + response)
    prompt_length: int


@dataclass
class MergeStats:
    """What aggregation did to a batch's calls (per learner step: ``training_steps``)."""

    calls: int = 0  #: calls with a response
    merged: int = 0  #: calls that joined the previous call's row
    breaks: list[PrefixBreak] = field(default_factory=list)
    cuts: int = 0  #: calls that extended the prefix but started a new row at the length limit
    rows: int = 0
    #: the tokens (prompt + response, after the length cuts) these calls take as one row each, as ``transition``
    #: trains them: beside the learner's tokens, what merging saved on the same trajectories
    call_tokens: int = 0

    @property
    def merge_rate(self) -> float:
        """Calls merged / calls (0 when nothing could merge: one call per attempt, or ``transition``)."""
        return self.merged / self.calls if self.calls else 0.0

    def add(self, other: "MergeStats") -> None:
        self.calls += other.calls
        self.merged += other.merged
        self.breaks.extend(other.breaks)
        self.cuts += other.cuts
        self.rows += other.rows
        self.call_tokens += other.call_tokens


@dataclass
class Segment:
    """One row's tokens before padding: a prompt, then response-side tokens with their loss mask."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]  #: 1 on generated tokens, 0 on context between calls
    logprobs: Optional[list[float]]  #: behaviour log-probs, 0 on context; None when a call lacks them
    policy_version: Optional[int]  #: the oldest call's (the staleness that matters)
    calls: int = 1

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids


def first_difference(prompt: Sequence[int], expected: Sequence[int]) -> Optional[int]:
    """The first position where ``prompt`` does not continue ``expected``; None when it starts with all of it."""
    for position, (got, want) in enumerate(zip(prompt, expected)):
        if got != want:
            return position
    return None if len(prompt) >= len(expected) else len(prompt)


def _oldest(a: Optional[int], b: Optional[int]) -> Optional[int]:
    return b if a is None else a if b is None else min(a, b)


def _call_segment(triplet: Triplet, max_prompt_length: Optional[int], max_response_length: Optional[int]) -> Segment:
    prompt, response, logprobs = triplet.prompt_token_ids, triplet.response_token_ids, triplet.response_logprobs
    if logprobs is not None and len(logprobs) != len(response):
        logprobs = None  # an inconsistent record: the row falls back to on-policy ratios
    if max_prompt_length and len(prompt) > max_prompt_length:
        prompt = prompt[-max_prompt_length:]
    if max_response_length and len(response) > max_response_length:
        response = response[:max_response_length]
        logprobs = logprobs[:max_response_length] if logprobs is not None else None
    return Segment(prompt, response, [1] * len(response), logprobs, triplet.policy_version)


def segments(
    triplets: Sequence[Triplet],
    aggregation: Aggregation,
    *,
    rollout_id: str = "",
    max_prompt_length: Optional[int] = None,
    max_response_length: Optional[int] = None,
) -> tuple[list[Segment], MergeStats]:
    """An attempt's calls (in call order) as rows; calls with an empty response carry nothing and are skipped."""
    stats = MergeStats()
    rows: list[Segment] = []
    previous: Optional[list[int]] = None  # the last call's full prompt + response, as recorded (not cut)
    for triplet in triplets:
        response = triplet.response_token_ids
        if not response:
            continue
        index, stats.calls = stats.calls, stats.calls + 1
        prompt = triplet.prompt_token_ids
        alone = _call_segment(triplet, max_prompt_length, max_response_length)  # the call's row, unless it merges
        stats.call_tokens += len(alone.prompt_ids) + len(alone.response_ids)
        joined = False
        if aggregation == "trajectory" and previous is not None and rows:
            differs = first_difference(prompt, previous)
            if differs is not None:
                stats.breaks.append(PrefixBreak(rollout_id, index, differs, len(previous), len(prompt)))
            else:
                joined = _join(rows[-1], prompt[len(previous):], triplet, max_response_length)
                if joined:
                    stats.merged += 1
                else:
                    stats.cuts += 1
        if not joined:
            rows.append(alone)
        previous = prompt + response
    stats.rows = len(rows)
    return rows, stats


def _join(row: Segment, context: list[int], triplet: Triplet, max_response_length: Optional[int]) -> bool:
    """Append ``context`` (mask 0) and the call's response (mask 1) to ``row``, unless that passes the limit."""
    response, logprobs = triplet.response_token_ids, triplet.response_logprobs
    if max_response_length and len(row.response_ids) + len(context) + len(response) > max_response_length:
        return False
    if logprobs is not None and len(logprobs) != len(response):
        logprobs = None
    row.response_ids += context + response
    row.loss_mask += [0] * len(context) + [1] * len(response)
    row.logprobs = None if row.logprobs is None or logprobs is None else row.logprobs + [0.0] * len(context) + logprobs
    row.policy_version = _oldest(row.policy_version, triplet.policy_version)
    row.calls += 1
    return True
