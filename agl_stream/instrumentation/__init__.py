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

import functools
import importlib
import importlib.util
import logging
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

import wrapt

from agl_stream._porting import module_getattr
from agl_stream.config import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instrumentation:
    name: str  # also the AGL_INSTRUMENT_<NAME> switch
    library: str  # the import name of the instrumented library
    instrumentor: str  # "module:Class" of the OpenInference instrumentor
    extra: str = "frameworks"  # the agl-stream extra that installs its tracing, or SIDE_VENV

    @property
    def install_hint(self) -> str:
        """What to install when the library is there and its tracing is not."""
        if self.extra == SIDE_VENV:  # its pins clash with the stack's: no extra can carry it
            return "pip install -c requirements/frameworks-venv-constraints.txt -r requirements/frameworks-venv.txt (make frameworks-venv)"
        return f"pip install 'agl-stream[{self.extra}]'"


#: frameworks that cannot install beside the stack's pins live in a side venv (``make frameworks-venv``)
SIDE_VENV = "frameworks-venv"


INSTRUMENTATIONS: tuple[Instrumentation, ...] = (
    Instrumentation("openai", "openai", "openinference.instrumentation.openai:OpenAIInstrumentor", extra="base"),
    Instrumentation("langchain", "langchain_core", "openinference.instrumentation.langchain:LangChainInstrumentor",
                    extra="langchain"),
    # MCP client tool calls as tool spans, plus OpenInference's MCP context propagation (see instrumentation/mcp.py)
    Instrumentation("mcp", "mcp", "agl_stream.instrumentation.mcp:MCPInstrumentor"),
    # LiteLLM SDK calls, one LLM call each: the inner OpenAI span, else the litellm one (instrumentation/litellm_sdk.py)
    Instrumentation("litellm", "litellm", "agl_stream.instrumentation.litellm_sdk:LiteLLMInstrumentor"),
    # Anthropic Messages calls, token ids when the server sends them, tool-runner tools (instrumentation/anthropic.py)
    Instrumentation("anthropic", "anthropic", "agl_stream.instrumentation.anthropic:AnthropicInstrumentor"),
    # OpenAI Agents SDK: agent and tool spans, MCP tools recorded once; LLM calls are the OpenAI client's
    Instrumentation("openai_agents", "agents", "agl_stream.instrumentation.openai_agents:OpenAIAgentsInstrumentor"),
    # AutoGen AgentChat: agent (agent.name) and tool spans, MCP tools recorded once; LLM calls are the OpenAI client's
    Instrumentation("autogen", "autogen_agentchat", "agl_stream.instrumentation.autogen:AutoGenInstrumentor",
                    extra=SIDE_VENV),
    # CrewAI: crew, agent (one per task, graph.node.id = role) and tool spans; its LLM calls are the OpenAI client's
    Instrumentation("crewai", "crewai", "openinference.instrumentation.crewai:CrewAIInstrumentor", extra=SIDE_VENV),
)

_LOCK = threading.RLock()  # the hook runs at once, under the lock, when the library is already imported
_ARMED: set[str] = set()  # instrumentations waiting for (or done with) their library's import
_ACTIVE: dict[str, Any] = {}  # instrumentations whose library was imported: name -> instrumentor


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def instrument_installed(tracer_provider: Any, env: Optional[Mapping[str, str]] = None) -> list[str]:
    """Instrument every supported library that is installed, when it is imported (once per process).

    Returns the names armed so far; :func:`active` says which libraries were imported and are traced."""
    settings = Settings.from_env(env)
    with _LOCK:
        if not settings.instrument:
            return sorted(_ARMED)
        for item in INSTRUMENTATIONS:
            if item.name in _ACTIVE or not _importable(item.library):
                continue
            if item.name in _ARMED and item.library not in sys.modules:
                continue  # its hook is waiting for the import (an imported, inactive one is armed again)
            if not switched_on(item, settings):
                continue
            module_name, _, class_name = item.instrumentor.partition(":")
            if not _importable(module_name.rsplit(".", 1)[0]) or not _importable(module_name):
                logger.warning("%s is installed but its tracing is not: %s", item.library, item.install_hint)
                continue
            ask_token_ids = item.name == "openai" and settings.request_token_ids
            _ARMED.add(item.name)
            # Activated when the agent imports the library (at once if it already did): importing
            # openai or langchain costs about a second of CPU per process, which an agent that never
            # uses them should not pay in every runner process.
            wrapt.register_post_import_hook(
                functools.partial(_activate, item, module_name, class_name, tracer_provider, ask_token_ids, env),
                item.library,
            )
        return sorted(_ARMED)


def _activate(item: Instrumentation, module_name: str, class_name: str, tracer_provider: Any, ask_token_ids: bool,
              env: Optional[Mapping[str, str]], _library: Any) -> None:  # fmt: skip
    """Post-import hook: the instrumented library was just imported; instrument it (unless its switch
    was turned off since it was armed, e.g. by ``agl_stream.air.auto_instrument(trace_llm_calls=False)``)."""
    with _LOCK:
        if item.name in _ACTIVE or not switched_on(item, Settings.from_env(env)):
            return
        instrumentor = getattr(importlib.import_module(module_name), class_name)()
        instrumentor.instrument(tracer_provider=tracer_provider)
        _ACTIVE[item.name] = instrumentor
    if ask_token_ids:
        from agl_stream.instrumentation.openai import request_token_ids

        request_token_ids()


def switched_on(item: Instrumentation, settings: Settings) -> bool:
    """``AGL_INSTRUMENT_<NAME>``: one library's switch (every name in :data:`INSTRUMENTATIONS` is a settings field)."""
    return bool(getattr(settings, f"instrument_{item.name}"))


def active() -> list[str]:
    return sorted(_ACTIVE)


def deactivate(name: str) -> bool:
    """Stop tracing one library in this process (``AGL_INSTRUMENT_<NAME>=0`` keeps it off in processes
    started later); True if it was being traced."""
    with _LOCK:
        instrumentor = _ACTIVE.pop(name, None)
        if instrumentor is not None:
            instrumentor.uninstrument()
    return instrumentor is not None


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
