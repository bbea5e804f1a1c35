"""Framework tracing with the ecosystem's maintained OpenTelemetry instrumentations (OpenInference).

:func:`instrument_installed` activates, on the tracer provider agl-stream's tracer captures, the
OpenInference instrumentor of every supported library that is importable in this process; each is
an optional extra (``pip install agl-stream[langchain]``). Their spans are mapped onto upstream's
conventions at capture (:mod:`agl_stream.instrumentation.conventions`). Nothing here is imported
by ``import agl_stream``; the tracer calls it when a runner starts.

``AGL_INSTRUMENT=0`` turns every instrumentation off, ``AGL_INSTRUMENT_<NAME>=0`` one of them
(``OPENAI``, ``LANGCHAIN``, ...); ``AGL_REQUEST_TOKEN_IDS=0`` stops asking servers for token ids.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instrumentation:
    name: str  # also the extra that installs it and the AGL_INSTRUMENT_<NAME> switch
    library: str  # the import name of the instrumented library
    instrumentor: str  # "module:Class" of the OpenInference instrumentor


INSTRUMENTATIONS: tuple[Instrumentation, ...] = (
    Instrumentation("openai", "openai", "openinference.instrumentation.openai:OpenAIInstrumentor"),
    Instrumentation("langchain", "langchain_core", "openinference.instrumentation.langchain:LangChainInstrumentor"),
)

_LOCK = threading.Lock()
_ACTIVE: dict[str, Any] = {}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def instrument_installed(tracer_provider: Any, env: Optional[Mapping[str, str]] = None) -> list[str]:
    """Instrument every supported library that is installed (once per process); returns the active names."""
    from agl_stream.env_var import resolve_bool_env_var

    with _LOCK:
        if not resolve_bool_env_var("AGL_INSTRUMENT", fallback=True, env=env):
            return sorted(_ACTIVE)
        for item in INSTRUMENTATIONS:
            if item.name in _ACTIVE or not _importable(item.library):
                continue
            if not resolve_bool_env_var(f"AGL_INSTRUMENT_{item.name.upper()}", fallback=True, env=env):
                continue
            module_name, _, class_name = item.instrumentor.partition(":")
            if not _importable(module_name.rsplit(".", 1)[0]) or not _importable(module_name):
                logger.warning("%s is installed but its tracing is not: pip install 'agl-stream[%s]'", item.library, item.name)
                continue
            instrumentor = getattr(importlib.import_module(module_name), class_name)()
            instrumentor.instrument(tracer_provider=tracer_provider)
            _ACTIVE[item.name] = instrumentor
        if "openai" in _ACTIVE and resolve_bool_env_var("AGL_REQUEST_TOKEN_IDS", fallback=True, env=env):
            from agl_stream.instrumentation.openai import request_token_ids

            request_token_ids()
        return sorted(_ACTIVE)


def active() -> list[str]:
    return sorted(_ACTIVE)
