"""Hand-built spans for adapter tests: a tiny builder that assigns ids, sequence ids and times."""

from __future__ import annotations

from typing import Any, Optional

from agl_stream import semconv
from agl_stream.types import Span

ROLLOUT = "ro-000000000001"
ATTEMPT = "at-00000001"


class SpanBuilder:
    """Spans of one attempt; ``sequence_id`` increases with each span created."""

    def __init__(self, rollout_id: str = ROLLOUT, attempt_id: str = ATTEMPT, trace_id: str = "a" * 32) -> None:
        self.rollout_id = rollout_id
        self.attempt_id = attempt_id
        self.trace_id = trace_id
        self.spans: list[Span] = []
        self._next = 0

    def span(
        self,
        name: str,
        start: float,
        end: float,
        parent: Optional[Span] = None,
        attributes: Optional[dict[str, Any]] = None,
        trace_id: Optional[str] = None,
        sequence_id: Optional[int] = None,
    ) -> Span:
        self._next += 1
        span = Span(
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            sequence_id=self._next if sequence_id is None else sequence_id,
            trace_id=trace_id or self.trace_id,
            span_id=f"{self._next:016x}",
            parent_id=parent.span_id if parent else None,
            name=name,
            start_time=start,
            end_time=end,
            attributes=attributes or {},
        )
        self.spans.append(span)
        return span

    def agent(self, name: str, start: float, end: float, parent: Optional[Span] = None) -> Span:
        return self.span(f"agent {name}", start, end, parent, {"agent.name": name})

    def llm(
        self,
        start: float,
        end: float,
        parent: Optional[Span] = None,
        prompt: Optional[list[int]] = None,
        response: Optional[list[int]] = None,
        response_id: Optional[str] = None,
        extra: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Span:
        attrs: dict[str, Any] = {}
        if prompt is not None:
            attrs[semconv.PROMPT_TOKEN_IDS] = prompt
        if response is not None:
            attrs[semconv.RESPONSE_TOKEN_IDS] = response
        if response_id is not None:
            attrs[semconv.GEN_AI_RESPONSE_ID] = response_id
        attrs.update(extra or {})
        return self.span(semconv.LLM_CALL_SPAN_NAME, start, end, parent, attrs, **kwargs)

    def reward(self, value: float, at: float, parent: Optional[Span] = None) -> Span:
        return self.span(
            semconv.AGL_ANNOTATION,
            at,
            at,
            parent,
            {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value},
        )
