"""Reading rewards from spans with upstream's rules (``agentlightning.emitter.reward``).

A span is a reward span when, in this order of precedence, it carries
1. ``agentlightning.reward.{i}.name|value`` entries (v0.3 ``emit_reward``; index 0 is the primary
   reward, more entries make it multi-dimensional), on any span name;
2. an AgentOps payload ``{"type": "reward", "value": x}`` (a dict or its JSON text) in
   ``agentops.task.output`` or ``agentops.entity.output`` (the deprecated ``@reward`` decorator);
   a payload whose value is null makes the span a non-reward;
3. a ``reward`` attribute on an ``agentlightning.annotation`` span (the v0.2 format).

Intermediate rewards (agl-stream's addition, e.g. AIR's): a reward span marked
``agl.reward.intermediate`` is a reward span like any other, but never the final reward (see
:func:`is_intermediate_reward`).

Ordering: upstream's readers take spans in its store's order, which is the order spans reached the
store, i.e. the order they ended. Spans reach agl-stream in any order, so :func:`store_order` sorts
them by end time instead of trusting arrival. Free of tracer imports, so adapters run offline.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping, Optional, TypeVar

from agl_stream.adapter.attributes import unflatten_prefix
from agl_stream.semconv import (
    AGL_ANNOTATION,
    REWARD_ANCHOR_TIME,
    REWARD_INTERMEDIATE,
    LightningSpanAttributes,
    RewardAttributes,
)

_PREFIX = LightningSpanAttributes.REWARD.value
_NAME = RewardAttributes.REWARD_NAME.value
_VALUE = RewardAttributes.REWARD_VALUE.value
_AGENTOPS_OUTPUT_KEYS = ("agentops.task.output", "agentops.entity.output")
_LEGACY_KEY = "reward"

S = TypeVar("S")


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


def _has_key_starting(attributes: Mapping[str, Any], prefix: str) -> bool:
    """A plain loop, cheaper than ``any()`` over a generator: every span is asked several times per attempt."""
    for key in attributes:
        if key.startswith(prefix):
            return True
    return False


def reward_dimensions(attributes: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``(name, value)`` of every ``agentlightning.reward.{i}`` entry, primary first; [] if none.

    Entries must be numbered 0..n-1 and each have a name and a numeric value (upstream refuses
    anything else with a validation error; here such a span simply carries no v0.3 reward).
    """
    if not _has_key_starting(attributes, _PREFIX):
        return []
    entries = unflatten_prefix(attributes, _PREFIX)
    if not isinstance(entries, list):
        return []
    dimensions: list[tuple[str, float]] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get(_NAME), str):
            return []
        value = _number(entry.get(_VALUE))
        if value is None:
            return []
        dimensions.append((entry[_NAME], value))
    return dimensions


def _agentops_payload(value: Any) -> Optional[dict[str, Any]]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def reward_value(name: str, attributes: Mapping[str, Any]) -> Optional[float]:
    """The primary reward a span carries, or None when it is not a reward span (see module doc)."""
    dimensions = reward_dimensions(attributes)
    if dimensions:
        return dimensions[0][1]
    for key in _AGENTOPS_OUTPUT_KEYS:
        payload = _agentops_payload(attributes.get(key)) if attributes.get(key) else None
        if payload is not None and payload.get("type") == "reward":
            return _number(payload.get("value"))
    if name == AGL_ANNOTATION and attributes.get(_LEGACY_KEY) is not None:
        return _number(attributes[_LEGACY_KEY])
    return None


def is_intermediate_reward(attributes: Mapping[str, Any]) -> bool:
    """A reward marked intermediate (``agl.reward.intermediate``; ``true`` as text after a trip through
    ClickHouse): it rewards one step, so it is matched to its own LLM call and is never the final reward."""
    flag = attributes.get(REWARD_INTERMEDIATE)
    return flag is True or (isinstance(flag, str) and flag.lower() in ("true", "1"))


def reward_anchor_time(attributes: Mapping[str, Any]) -> Optional[float]:
    """When the step an intermediate reward is for began (``agl.reward.anchor_time``, seconds), if recorded."""
    return _number(attributes.get(REWARD_ANCHOR_TIME))


def reward_of(span: Any) -> Optional[float]:
    """The primary reward of a span (an agl ``Span``, ``SpanCoreFields`` or OTel ``ReadableSpan``)."""
    return reward_value(getattr(span, "name", "") or "", getattr(span, "attributes", None) or {})


# ---------------------------------------------------------------------------------------------- order


def _seconds(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def store_order_key(span: Any) -> tuple[float, float, int, str]:
    """Where upstream's store would have put this span: by when it ended (start, sequence id and
    span id break ties). A span without an end time sorts by its start."""
    start = _seconds(getattr(span, "start_time", None))
    end = _seconds(getattr(span, "end_time", None))
    first = end if end is not None else start if start is not None else -math.inf
    sequence = getattr(span, "sequence_id", 0)
    return (first, start if start is not None else first, sequence if isinstance(sequence, int) else 0,
            str(getattr(span, "span_id", "")))  # fmt: skip


def store_order(spans: Iterable[S]) -> list[S]:
    """Spans in upstream's store order when they carry times; otherwise in the order given."""
    items = list(spans)
    keys = [store_order_key(s) for s in items]  # once per span: the check and the sort share them
    if any(key[0] == -math.inf for key in keys):
        return items
    return [items[i] for i in sorted(range(len(items)), key=keys.__getitem__)]  # stable, as sorted(items, key=...)


def find_reward_spans(spans: Iterable[S]) -> list[S]:
    """The reward spans, in store order."""
    return [span for span in store_order(spans) if reward_of(span) is not None]


def find_final_reward(spans: Iterable[Any]) -> Optional[float]:
    """The primary reward of the last reward span in store order (upstream's final reward); intermediate
    rewards are left out."""
    return final_reward(spans)[0]


def find_final_reward_dimensions(spans: Iterable[Any]) -> dict[str, float]:
    """Every named dimension of the final reward (``{}`` for a plain number or no reward): task success
    (``correct``) and the parts of a shaped reward travel beside the primary value."""
    return final_reward(spans)[1]


def final_reward(spans: Iterable[Any]) -> tuple[Optional[float], dict[str, float]]:
    """:func:`find_final_reward` and :func:`find_final_reward_dimensions` from one pass over the spans."""
    found = [s for s in find_reward_spans(spans) if not is_intermediate_reward(getattr(s, "attributes", None) or {})]
    if not found:
        return None, {}
    return reward_of(found[-1]), dict(reward_dimensions(getattr(found[-1], "attributes", None) or {}))

