"""Reading rewards from spans: upstream's ``agentlightning.reward.{i}.value`` annotations (index 0 = primary).

Kept here, free of tracer imports, so adapters run offline without the OpenTelemetry SDK.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Optional

from agl_stream.semconv import AGL_ANNOTATION, AGL_REWARD, LightningSpanAttributes, RewardAttributes
from agl_stream.types import Span

_PREFIX = LightningSpanAttributes.REWARD.value
_VALUE = RewardAttributes.REWARD_VALUE.value
_NAME = RewardAttributes.REWARD_NAME.value
# AgentOps-style legacy payloads: {"type": "reward", "value": x} in one of these attributes.
_LEGACY_PAYLOAD_KEYS = ("agentops.task.output", "agentops.entity.output")


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def reward_dict(attributes: Mapping[str, Any], name: str = "") -> Optional[dict[str, float]]:
    """All named rewards of one span in index order (primary first), or None if it carries none."""
    rewards: dict[str, float] = {}
    i = 0
    while True:
        value = _number(attributes.get(f"{_PREFIX}.{i}.{_VALUE}"))
        if value is None:
            break
        label = attributes.get(f"{_PREFIX}.{i}.{_NAME}")
        rewards[str(label) if label is not None else ("primary" if i == 0 else str(i))] = value
        i += 1
    if rewards:
        return rewards
    if name == AGL_REWARD:  # legacy reward span: {"reward": x} or {"value": x}
        value = _number(attributes.get("reward", attributes.get("value")))
        if value is not None:
            return {"primary": value}
    for key in _LEGACY_PAYLOAD_KEYS:
        raw = attributes.get(key)
        if isinstance(raw, str) and '"reward"' in raw:
            try:
                payload = json.loads(raw)
            except ValueError:
                continue
            if isinstance(payload, dict) and payload.get("type") == "reward":
                value = _number(payload.get("value"))
                if value is not None:
                    return {"primary": value}
    return None


def reward_of(span: Span) -> Optional[float]:
    """The primary reward of a span, or None when it is not a reward span."""
    if span.name not in (AGL_ANNOTATION, AGL_REWARD) and not any(k in span.attributes for k in _LEGACY_PAYLOAD_KEYS):
        return None
    rewards = reward_dict(span.attributes, span.name)
    return next(iter(rewards.values())) if rewards else None


def find_final_reward(spans: Iterable[Span]) -> Optional[float]:
    """The last primary reward in sequence order (upstream's final reward of an attempt)."""
    from agl_stream.adapter.base import span_order_key

    final: Optional[float] = None
    for span in sorted(spans, key=span_order_key):
        value = reward_of(span)
        if value is not None:
            final = value
    return final
