"""Events an agent posts about its attempt (upstream v1.0's event URL): a reward, or anything else it reports.

v1.0's controller hands each agent ``AGL_EVENT_URL`` (``/api/rollouts/{rollout}/attempt/{attempt}/events``) and
the agent posts ``{"event_type": "reward", "data": {"value": r}}`` there. Each event becomes a span of the
attempt on ``agl.spans``, the same way as its model calls:
- ``reward``: upstream's reward annotation (``agentlightning.reward.0.value``), which every adapter reads;
  the other ``data`` fields ride along as ``agl.event.data.<field>``;
- any other type: an ``agentlightning.annotation`` span with ``agl.event.type`` and the data as JSON.
"""

from __future__ import annotations

import json
import numbers
import time
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agl_stream.emitter.reward import PRIMARY_NAME, reward_attributes
from agl_stream.semconv import AGL_ANNOTATION
from agl_stream.types import Span
from agl_stream_ingest.proxy.record import proxy_span

EVENT_TYPE_ATTRIBUTE = "agl.event.type"
EVENT_DATA_ATTRIBUTE = "agl.event.data"


class AgentEvent(BaseModel):
    event_type: str = Field(min_length=1, max_length=200)
    data: dict[str, Any] = Field(default_factory=dict)


class EventRefused(ValueError):
    """An event that cannot be recorded; the message says why (answered with 400)."""


def parse_event(raw: bytes) -> AgentEvent:
    try:
        event = AgentEvent.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise EventRefused(f"an event is {{\"event_type\": str, \"data\": {{...}}}}: {first['msg']} at "
                           f"{'.'.join(str(p) for p in first['loc']) or 'the body'}") from None  # fmt: skip
    if event.event_type == "reward":
        value = event.data.get("value")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise EventRefused(f'a reward event needs a number in data.value, got {json.dumps(value)[:80]}')
    return event


def build_event_span(rollout_id: str, attempt_id: str, sequence_id: int, event: AgentEvent) -> Span:
    now = time.time()
    if event.event_type == "reward":
        attributes = reward_attributes([(PRIMARY_NAME, float(event.data["value"]))])
        for key, value in event.data.items():
            if key != "value":
                attributes[f"{EVENT_DATA_ATTRIBUTE}.{key}"] = value if isinstance(value, (str, int, float, bool)) else json.dumps(value)
        attributes[EVENT_TYPE_ATTRIBUTE] = "reward"
    else:
        attributes = {EVENT_TYPE_ATTRIBUTE: event.event_type, EVENT_DATA_ATTRIBUTE: json.dumps(event.data)}
    return proxy_span(rollout_id, attempt_id, sequence_id, AGL_ANNOTATION, attributes, start_time=now, end_time=now)
