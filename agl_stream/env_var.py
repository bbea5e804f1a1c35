"""Environment-variable parsing with upstream's rules (``agentlightning.env_var``).

Booleans: truthy ``1, true, yes, on``; falsy ``0, false, no, off`` (trimmed, case-insensitive);
anything else is a ``ValueError`` naming the variable. An explicit ``override`` wins over the
environment; ``fallback`` is used when the variable is unset or empty.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

TRUTHY = frozenset({"1", "true", "yes", "on"})
FALSY = frozenset({"0", "false", "no", "off"})


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in TRUTHY:
        return True
    if value in FALSY:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean; use one of {sorted(TRUTHY)} or {sorted(FALSY)}")


def _raw(name: str, env: Optional[Mapping[str, str]]) -> Optional[str]:
    value = (os.environ if env is None else env).get(name)
    if value is None or value.strip() == "":
        return None
    return value


def resolve_bool_env_var(
    name: str, override: Optional[bool] = None, fallback: Optional[bool] = None, env: Optional[Mapping[str, str]] = None
) -> Optional[bool]:
    if override is not None:
        return override
    raw = _raw(name, env)
    return fallback if raw is None else parse_bool(name, raw)


def resolve_int_env_var(
    name: str, override: Optional[int] = None, fallback: Optional[int] = None, env: Optional[Mapping[str, str]] = None
) -> Optional[int]:
    if override is not None:
        return override
    raw = _raw(name, env)
    if raw is None:
        return fallback
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def resolve_str_env_var(
    name: str, override: Optional[str] = None, fallback: Optional[str] = None, env: Optional[Mapping[str, str]] = None
) -> Optional[str]:
    if override is not None:
        return override
    raw = _raw(name, env)
    return fallback if raw is None else raw.strip()
