"""Flat dotted span attributes back into nested values, the two ways upstream's adapters read them.

``unflatten`` (used for triplet payloads and rewards) turns a dict whose keys are exactly ``0..n-1``
into a list and keeps anything else a dict. ``group_indexed`` (used for chat messages) turns a level
into a list as soon as any key there starts with a number, ordered by that number.
"""

from __future__ import annotations

from typing import Any, Mapping, Union

Nested = Union[dict[str, Any], list[Any]]


def with_prefix(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The attributes under ``prefix.`` with the prefix removed (a key equal to ``prefix`` is ignored)."""
    dotted = f"{prefix}."  # once, not per key: adapters call this for every prefix of every span
    cut = len(dotted)
    found: dict[str, Any] = {}
    for key, value in attributes.items():
        if key.startswith(dotted):
            found[key[cut:]] = value
    return found


def unflatten(flat: Mapping[str, Any]) -> Nested:
    """``{"a.b": 1, "a.c.0": 2, "a.c.1": 3}`` -> ``{"a": {"b": 1, "c": [2, 3]}}``.

    A level becomes a list only when its keys are exactly ``"0"`` .. ``"n-1"``. Where paths collide
    (``a`` and ``a.b``), the later key wins.
    """
    root: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = root
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = value
    return _lists(root)  # type: ignore[return-value]


def _lists(node: Any) -> Any:
    if isinstance(node, list):
        return [_lists(item) for item in node]
    if not isinstance(node, dict) or not node:
        return node
    converted = {key: _lists(value) for key, value in node.items()}
    if set(converted) == {str(i) for i in range(len(converted))}:
        return [converted[str(i)] for i in range(len(converted))]
    return converted


def unflatten_prefix(attributes: Mapping[str, Any], prefix: str) -> Nested:
    """``unflatten`` of the attributes under ``prefix`` (empty dict when there are none)."""
    return unflatten(with_prefix(attributes, prefix))


def first_unflattened(attributes: Mapping[str, Any], prefixes: tuple[str, ...]) -> Nested | None:
    """The first non-empty ``unflatten_prefix`` among ``prefixes``, else None."""
    for prefix in prefixes:
        found = unflatten_prefix(attributes, prefix)
        if found:
            return found
    return None


def group_indexed(attributes: Mapping[str, Any], prefix: str) -> Nested:
    """GenAI-style grouping: ``gen_ai.prompt.0.role`` -> ``[{"role": ...}]``.

    If any key below ``prefix`` starts with a number, the level is a list ordered by that number
    (keys without a number at that level are dropped, gaps close up); otherwise it is a dict whose
    dotted keys are grouped the same way, level by level.
    """
    below = with_prefix(attributes, prefix)
    if any(key.split(".", 1)[0].isdigit() for key in below):
        items: dict[int, dict[str, Any]] = {}
        for key, value in below.items():
            head, _, rest = key.partition(".")
            if head.isdigit():
                items.setdefault(int(head), {})[f"{prefix}.{rest}"] = value
        return [group_indexed(items[i], prefix) for i in sorted(items)]
    grouped: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in below.items():
        head, dot, _rest = key.partition(".")
        if dot:
            nested.setdefault(head, {})[f"{prefix}.{key}"] = value
        else:
            grouped[key] = value
    for head, sub in nested.items():
        grouped[head] = group_indexed(sub, f"{prefix}.{head}")
    return grouped
