"""Rewards: ``emit_reward`` writes upstream's annotation span; the readers find rewards in a trace.

A reward span is named ``agentlightning.annotation`` and carries ``agentlightning.reward.{i}.name``
and ``agentlightning.reward.{i}.value``; index 0 is the primary reward, more entries make it
multi-dimensional.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Optional

from agl_stream.emitter._core import emit_core
from agl_stream.semconv import AGL_ANNOTATION, AGL_REWARD, LightningSpanAttributes, RewardAttributes, RewardPydanticModel
from agl_stream.types import SpanCoreFields

PRIMARY_NAME = "primary"
_PREFIX = LightningSpanAttributes.REWARD.value


def reward_attributes(rewards: list[tuple[str, float]]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for i, (name, value) in enumerate(rewards):
        attrs[f"{_PREFIX}.{i}.{RewardAttributes.REWARD_NAME.value}"] = name
        attrs[f"{_PREFIX}.{i}.{RewardAttributes.REWARD_VALUE.value}"] = value
    return attrs


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"reward {name!r} must be a number, not {type(value).__name__}")
    return float(value)


def emit_reward(
    reward: float | Mapping[str, float],
    *,
    primary_key: Optional[str] = None,
    attributes: Optional[Mapping[str, Any]] = None,
    propagate: bool = True,
) -> SpanCoreFields:
    """Record a reward: a number, or a dict of named rewards (``primary_key`` names the primary one)."""
    if isinstance(reward, Mapping):
        if not reward:
            raise ValueError("emit_reward got an empty dict")
        if primary_key is None:
            if len(reward) > 1:
                raise ValueError("a multi-dimensional reward needs primary_key= to say which one is primary")
            primary_key = next(iter(reward))
        if primary_key not in reward:
            raise ValueError(f"primary_key {primary_key!r} is not among the rewards {sorted(reward)}")
        ordered = [(primary_key, _as_float(primary_key, reward[primary_key]))]
        ordered += [(k, _as_float(k, v)) for k, v in reward.items() if k != primary_key]
    else:
        if primary_key is not None:
            raise ValueError("primary_key only applies to a dict of rewards")
        ordered = [(PRIMARY_NAME, _as_float(PRIMARY_NAME, reward))]
    return emit_core(AGL_ANNOTATION, reward_attributes(ordered), kind="reward", propagate=propagate, extra=attributes)


def _attributes_of(span: Any) -> Mapping[str, Any]:
    return getattr(span, "attributes", None) or {}


def get_rewards_from_span(span: Any) -> list[RewardPydanticModel]:
    """All rewards of one span (Span, SpanCoreFields or OTel ReadableSpan), primary first."""
    attrs = _attributes_of(span)
    rewards: list[RewardPydanticModel] = []
    i = 0
    while True:
        value = attrs.get(f"{_PREFIX}.{i}.{RewardAttributes.REWARD_VALUE.value}")
        if value is None:
            break
        name = attrs.get(f"{_PREFIX}.{i}.{RewardAttributes.REWARD_NAME.value}", PRIMARY_NAME if i == 0 else str(i))
        rewards.append(RewardPydanticModel(name=str(name), value=float(value)))
        i += 1
    if not rewards and getattr(span, "name", None) == AGL_REWARD:  # legacy reward spans
        legacy = attrs.get("reward", attrs.get("value"))
        if isinstance(legacy, (int, float)) and not isinstance(legacy, bool):
            rewards.append(RewardPydanticModel(name=PRIMARY_NAME, value=float(legacy)))
    return rewards


def get_reward_value(span: Any) -> Optional[float]:
    """The primary reward of a span, or None if it is not a reward span."""
    rewards = get_rewards_from_span(span)
    return rewards[0].value if rewards else None


def is_reward_span(span: Any) -> bool:
    return get_reward_value(span) is not None


def _ordered(spans: Iterable[Any]) -> list[Any]:
    spans = list(spans)
    if spans and all(isinstance(getattr(s, "sequence_id", None), int) for s in spans):
        return sorted(spans, key=lambda s: (s.sequence_id, getattr(s, "start_time", None) or 0.0))
    return spans


def find_reward_spans(spans: Iterable[Any]) -> list[Any]:
    """Reward spans, in sequence order when the spans carry sequence ids."""
    return [span for span in _ordered(spans) if is_reward_span(span)]


def find_final_reward(spans: Iterable[Any]) -> Optional[float]:
    """The last non-null primary reward of the trace (upstream's final reward)."""
    final: Optional[float] = None
    for span in find_reward_spans(spans):
        value = get_reward_value(span)
        if value is not None:
            final = value
    return final
