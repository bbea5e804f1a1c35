"""Environment-variable parsing with upstream's rules (``agentlightning.env_var``).

Booleans: truthy ``1, true, yes, on``; falsy ``0, false, no, off`` (trimmed, case-insensitive);
anything else is a ``ValueError`` naming the variable. An explicit ``override`` wins over the
environment; ``fallback`` is used when the variable is unset or empty.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Mapping, Optional, Union

class LightningEnvVar(str, Enum):
    """Upstream's environment variables. ``AGL_CURRENT_ROLE`` (``algorithm``, ``runner``, ``both``) and
    ``AGL_EMITTER_DEBUG`` mean the same here; ``AGL_MANAGED_STORE``, ``AGL_SERVER_HOST`` and
    ``AGL_SERVER_PORT`` configure upstream's store server, which agl-stream does not have (agents and
    algorithms reach Kafka through ``AGL_KAFKA_BOOTSTRAP``), so nothing reads them."""

    AGL_EMITTER_DEBUG = "AGL_EMITTER_DEBUG"
    AGL_MANAGED_STORE = "AGL_MANAGED_STORE"
    AGL_CURRENT_ROLE = "AGL_CURRENT_ROLE"
    AGL_SERVER_HOST = "AGL_SERVER_HOST"
    AGL_SERVER_PORT = "AGL_SERVER_PORT"


EnvVarName = Union[str, LightningEnvVar]


def _key(name: EnvVarName) -> str:
    return name.value if isinstance(name, LightningEnvVar) else name

TRUTHY = frozenset({"1", "true", "yes", "on"})
FALSY = frozenset({"0", "false", "no", "off"})


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in TRUTHY:
        return True
    if value in FALSY:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean; use one of {sorted(TRUTHY)} or {sorted(FALSY)}")


def _raw(name: EnvVarName, env: Optional[Mapping[str, str]]) -> Optional[str]:
    value = (os.environ if env is None else env).get(_key(name))
    if value is None or value.strip() == "":
        return None
    return value


def resolve_bool_env_var(
    name: EnvVarName, override: Optional[bool] = None, fallback: Optional[bool] = None, env: Optional[Mapping[str, str]] = None
) -> Optional[bool]:
    if override is not None:
        return override
    raw = _raw(name, env)
    return fallback if raw is None else parse_bool(_key(name), raw)


def resolve_int_env_var(
    name: EnvVarName, override: Optional[int] = None, fallback: Optional[int] = None, env: Optional[Mapping[str, str]] = None
) -> Optional[int]:
    if override is not None:
        return override
    raw = _raw(name, env)
    if raw is None:
        return fallback
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{_key(name)}={raw!r} is not an integer") from None


def resolve_str_env_var(
    name: EnvVarName, override: Optional[str] = None, fallback: Optional[str] = None, env: Optional[Mapping[str, str]] = None
) -> Optional[str]:
    if override is not None:
        return override
    raw = _raw(name, env)
    return fallback if raw is None else raw.strip()
