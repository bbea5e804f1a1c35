"""What one front-door replica knows about the attempts it serves: the spans it accepted, the attempts it handed out.

A runner reports ``finished`` with the number of spans it produced, so consumers know when they have
them all, and with the final reward it computed, so algorithms that follow ``agl.attempts`` (RL's
evaluations, APO's scores) need not read spans. Upstream's runners send neither: they export spans
(OTLP or ``POST /spans``) and then report the outcome. The replica that handed an attempt out
(dequeue, start) counts the distinct spans it accepted for it and keeps the last reward span's value
in upstream's store order (upstream's final reward), and reports both; an attempt it did not hand
out (its runner failed over from another replica, or the balancer spread its calls) is reported
without them, and consumers then wait their grace period instead: a count from a replica that saw
only part of the spans would make them stop early, and its last reward might not be the final one.
Memory is bounded: the least recently used attempts are forgotten beyond ``max_attempts``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from agl_stream.adapter import rewards
from agl_stream.types import Span

AttemptKey = tuple[str, str]


@dataclass(frozen=True)
class Finished:
    """What the replica that handed an attempt out knows of it when its runner reports the outcome."""

    span_count: int
    final_reward: Optional[float] = None
    #: every named dimension of the final reward, when it has several (``correct`` beside a shaped primary)
    reward_dimensions: dict[str, float] = field(default_factory=dict)

    def event_metadata(self) -> dict[str, Any]:
        """The ``finished`` event's reward fields, as agl-stream's runners write them."""
        if self.final_reward is None:
            return {}
        out: dict[str, Any] = {"final_reward": self.final_reward}
        if len(self.reward_dimensions) > 1:
            out["reward_dimensions"] = dict(self.reward_dimensions)
        return out


class _Entry:
    __slots__ = ("owned", "span_ids", "reward")

    def __init__(self) -> None:
        self.owned = False
        self.span_ids: set[str] = set()
        # (store order key, primary value, dimensions) of the latest reward span accepted
        self.reward: Optional[tuple[Any, float, dict[str, float]]] = None


class SpanLedger:
    def __init__(self, max_attempts: int = 20_000) -> None:
        self.max_attempts = max_attempts
        self._entries: OrderedDict[AttemptKey, _Entry] = OrderedDict()

    def _entry(self, key: AttemptKey) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            if len(self._entries) > self.max_attempts:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return entry

    def hand_out(self, rollout_id: str, attempt_id: str) -> None:
        """This replica gave the attempt to a runner (dequeue or start): it sees the attempt from its start."""
        self._entry((rollout_id, attempt_id)).owned = True

    def is_new(self, span: Span) -> bool:
        """False when this replica already accepted a span with this id for the attempt (a client retry)."""
        entry = self._entries.get((span.rollout_id, span.attempt_id))
        return entry is None or span.span_id not in entry.span_ids

    def accepted(self, spans: Iterable[Span]) -> None:
        """Spans the broker acknowledged."""
        for span in spans:
            entry = self._entry((span.rollout_id, span.attempt_id))
            entry.span_ids.add(span.span_id)
            value = rewards.reward_of(span)
            if value is not None:
                key = rewards.store_order_key(span)
                if entry.reward is None or key >= entry.reward[0]:
                    entry.reward = (key, value, dict(rewards.reward_dimensions(span.attributes or {})))

    def finish(self, rollout_id: str, attempt_id: str) -> Optional[Finished]:
        """What to report with the attempt's outcome (None: unknown here), and forget the attempt."""
        entry = self._entries.pop((rollout_id, attempt_id), None)
        if entry is None or not entry.owned:
            return None
        if entry.reward is None:
            return Finished(len(entry.span_ids))
        return Finished(len(entry.span_ids), entry.reward[1], entry.reward[2])
