"""What one front-door replica knows about the attempts it serves: the spans it accepted, the attempts it handed out.

A runner reports ``finished`` with the number of spans it produced, so consumers know when they have
them all. Upstream's runners do not count: they export spans (OTLP or ``POST /spans``) and then report
the outcome. The replica that handed an attempt out (dequeue, start) counts the distinct spans it
accepted for it and reports that count; an attempt it did not hand out (its runner failed over from
another replica, or the balancer spread its calls) is reported without a count, and consumers then
wait their grace period instead: a count from a replica that saw only part of the spans would make
them stop early. Memory is bounded: the least recently used attempts are forgotten beyond ``max_attempts``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Optional

from agl_stream.types import Span

AttemptKey = tuple[str, str]


class _Entry:
    __slots__ = ("owned", "span_ids")

    def __init__(self) -> None:
        self.owned = False
        self.span_ids: set[str] = set()


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
            self._entry((span.rollout_id, span.attempt_id)).span_ids.add(span.span_id)

    def finish(self, rollout_id: str, attempt_id: str) -> Optional[int]:
        """The span count to report with the attempt's outcome (None: unknown here), and forget the attempt."""
        entry = self._entries.pop((rollout_id, attempt_id), None)
        if entry is None or not entry.owned:
            return None
        return len(entry.span_ids)
