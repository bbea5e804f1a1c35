"""Rewards: ``emit_reward`` writes upstream's annotation span; the readers find rewards in a trace.

A reward span is named ``agentlightning.annotation`` and carries ``agentlightning.reward.{i}.name``
and ``agentlightning.reward.{i}.value``; index 0 is the primary reward, more entries make it
multi-dimensional.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from agl_stream._porting import module_getattr
from agl_stream.adapter import rewards
from agl_stream.emitter._core import emit_core
from agl_stream.semconv import AGL_ANNOTATION, LightningSpanAttributes, RewardAttributes, RewardPydanticModel
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


def get_rewards_from_span(span: Any) -> list[RewardPydanticModel]:
    """All v0.3 rewards of one span (Span, SpanCoreFields or OTel ReadableSpan), primary first."""
    attributes = getattr(span, "attributes", None) or {}
    return [RewardPydanticModel(name=name, value=value) for name, value in rewards.reward_dimensions(attributes)]


def get_reward_value(span: Any) -> Optional[float]:
    """The primary reward of a span, or None if it is not a reward span (upstream's formats, see
    :mod:`agl_stream.adapter.rewards`)."""
    return rewards.reward_of(span)


def is_reward_span(span: Any) -> bool:
    return get_reward_value(span) is not None


def find_reward_spans(spans: Iterable[Any]) -> list[Any]:
    """Reward spans in the order upstream's store keeps them (when they ended), whatever the input order."""
    return rewards.find_reward_spans(spans)


def find_final_reward(spans: Iterable[Any]) -> Optional[float]:
    """The primary reward of the last reward span (upstream's final reward of a trace)."""
    return rewards.find_final_reward(spans)


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
