"""Identifier generators with upstream's formats (``ro-`` + 12 hex, ``at-`` + 8 hex, OTel span/trace ids)."""

from __future__ import annotations

import secrets


def generate_rollout_id() -> str:
    return "ro-" + secrets.token_hex(6)


def generate_attempt_id() -> str:
    return "at-" + secrets.token_hex(4)


def generate_resources_id() -> str:
    return "rs-" + secrets.token_hex(6)


def generate_span_id() -> str:
    return secrets.token_hex(8)


def generate_trace_id() -> str:
    return secrets.token_hex(16)


def generate_group_id() -> str:
    return "gr-" + secrets.token_hex(6)


def generate_id(length: int) -> str:
    """A random lowercase hex id of ``length`` characters (upstream's ``agentlightning.utils.id``)."""
    if length < 0:
        raise ValueError(f"length must be >= 0, not {length}")
    return secrets.token_hex((length + 1) // 2)[:length]
