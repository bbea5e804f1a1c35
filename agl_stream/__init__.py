"""agl-stream: Agent Lightning's concepts over an event-streaming pipeline.

``import agl_stream as agl`` gives upstream's public names (``agl.Trainer``, ``agl.rollout``,
``agl.emit_reward``, ``agl.TracerTraceToTriplet``, ``agl.APO``, ``agl.VERL``...) with the same
meaning; the upstream names that have no counterpart here are listed with their replacement in
``docs/porting-from-agent-lightning.md``. Every name is resolved on first use (PEP 562), so
importing the package is cheap and never pulls torch, faust, chdb or litellm (a test enforces this);
``agl.APO``, ``agl.VERL`` and ``agl.RL`` load the trainer service package when first touched.
An upstream name or module path that agl-stream replaces raises an ``ImportError`` naming the
replacement (``agl_stream._porting``).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional

__version__ = "0.1.0"

#: public name -> module that defines it (the attribute has the same name)
_NAMES: dict[str, str] = {}


def _add(module: str, *names: str) -> None:
    for name in names:
        _NAMES[name] = module


# the data model (upstream ``agentlightning.types``)
_add(
    "agl_stream.types",
    "ATTEMPT_STATUSES", "ROLLOUT_STATUSES", "TERMINAL_ATTEMPT_STATUSES", "TERMINAL_ROLLOUT_STATUSES",
    "Attempt", "AttemptEvent", "AttemptEventKind", "AttemptStatus", "AttemptedRollout", "AttributeValue",
    "Attributes", "Dataset", "DeadLetter", "Event", "LLM", "Link", "NamedResources", "OtelResource",
    "ParallelWorkerBase", "PromptTemplate", "ProxyLLM", "Resource", "ResourceUnion", "ResourcesUpdate", "Rollout",
    "RolloutConfig", "RolloutControl", "RolloutMode", "RolloutRawResult", "RolloutSnapshot", "RolloutStatus", "Span",
    "SpanAttributeNames", "SpanContext", "SpanCoreFields", "SpanLike", "SpanNames", "SpanRecordingContext",
    "StatusCode", "TaskInput", "TraceState", "TraceStatus", "Trajectory", "Triplet", "Worker", "WorkerStatus",
)  # fmt: skip
_add("agl_stream.config", "Settings", "SettingsError", "load_settings")
_add("agl_stream.ids", "generate_attempt_id", "generate_rollout_id", "generate_span_id", "generate_trace_id")
_add("agl_stream.serialization", "RecordError", "decode", "encode")
_add("agl_stream.env_var", "LightningEnvVar", "resolve_bool_env_var", "resolve_int_env_var", "resolve_str_env_var")
_add("agl_stream.logging", "configure_logger", "setup_logging", "setup_module_logging")
# the agent side
_add(
    "agl_stream.emitter",
    "emit_annotation", "emit_exception", "emit_message", "emit_object", "emit_reward", "find_final_reward",
    "find_reward_spans", "get_message_value", "get_object_value", "get_reward_value", "get_rewards_from_span",
    "is_reward_span", "operation",
)  # fmt: skip
_add("agl_stream.litagent", "FunctionalLitAgent", "LitAgent", "llm_rollout", "prompt_rollout", "rollout")
_add("agl_stream.runner", "Hook", "LitAgentRunner")
_add("agl_stream.tracer", "OtelTracer", "Tracer", "create_tracer", "get_active_tracer")
_add("agl_stream.tracer.base", "clear_active_tracer", "set_active_tracer")
_add("agl_stream.tracer.compat", "AgentOpsTracer", "DummyTracer")
# adapters
_add("agl_stream.adapter", "Adapter", "LlmProxyTraceToTriplet", "TraceAdapter", "TraceToMessages", "TracerTraceToTriplet")
_add("agl_stream.adapter.upstream", "OtelTraceAdapter", "TraceToTripletBase")
# the algorithm side
_add("agl_stream.client", "EnqueueRolloutRequest", "StoreClient")
_add("agl_stream.algorithm", "Algorithm", "Baseline", "FastAlgorithm", "algo")
_add("agl_stream.trainer", "Trainer")
# AIR (automatic intermediate rewards): an agl-stream addition beside upstream's names (``agl.air.tool`` ...)
_add("agl_stream.air", "auto_instrument")
# training as a service (the S3 surface; its Resource and Task stay in agl_stream.training_service, since
# upstream's agl.Resource means something else)
_add("agl_stream.training_service", "Client", "EvalResult", "TrainingResult", "TrainingServiceError")
# learning algorithms of the trainer service (torch / an LLM client): loaded on first use
_SERVICE_NAMES = {
    "APO": ("agl_stream_trainer.algorithms.apo", "trainer"),
    "VERL": ("agl_stream_trainer.rl", "trainer"),
    "RL": ("agl_stream_trainer.rl", "trainer"),
}

#: submodules reachable as attributes (``agl.semconv``), including upstream's module names
_SUBMODULES: dict[str, str] = {
    name: f"agl_stream.{name}"
    for name in ("adapter", "air", "algorithm", "client", "config", "emitter", "env_var", "execution", "instrumentation",
                 "litagent", "logging", "reward", "runner", "semconv", "tracer", "trainer", "training_service", "types",
                 "utils")  # fmt: skip
}
_SUBMODULES.update(core="agl_stream.types.core", resources="agl_stream.types.resources")

__all__ = sorted({*_NAMES, *_SERVICE_NAMES})

#: upstream's top-level names and modules that agl-stream replaces (the text is in agl_stream._porting)
_REPLACED_NAMES = frozenset({
    "AgentLightningClient", "AgentLightningServer", "ClientServerExecutionStrategy", "CollectionBasedLightningStore",
    "DevTaskLoader", "ExecutionEvent", "ExecutionStrategy", "FilterField", "FilterOptions", "GenericResponse",
    "InMemoryLightningStore", "LLMProxy", "LegacyAgentRunner", "LightningStore", "LightningStoreCapabilities",
    "LightningStoreClient", "LightningStoreServer", "LightningStoreStatistics", "LightningStoreThreaded",
    "MultiprocessingEvent", "PaginatedResult", "RolloutLegacy", "RolloutRawResultLegacy", "Runner",
    "SharedMemoryExecutionStrategy", "SortOptions", "Task", "TaskIfAny", "ThreadingEvent", "build_component",
    "lightning_cli",
})  # fmt: skip
_REPLACED_MODULES = frozenset({"llm_proxy", "server", "store"})


class _ReplacedModuleFinder:
    """Last on ``sys.meta_path``, so asked only about modules no file provides: an ``agl_stream.…`` path
    that upstream has and agl-stream replaces raises ``ModuleNotFoundError`` naming the replacement."""

    agl_stream_porting = True  # identifies an installed instance across reloads

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.startswith("agl_stream."):
            from agl_stream._porting import replaced_module

            error: Optional[ModuleNotFoundError] = replaced_module(fullname)
            if error is not None:
                raise error
        return None


if not any(getattr(finder, "agl_stream_porting", False) for finder in sys.meta_path):
    sys.meta_path.append(_ReplacedModuleFinder())


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif name in _SERVICE_NAMES:
        module, extra = _SERVICE_NAMES[name]
        try:
            value = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:
            raise ImportError(
                f"agl_stream.{name} needs the '{extra}' extra: pip install 'agl-stream[{extra}]' ({exc})"
            ) from exc
    elif name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    elif name in _REPLACED_NAMES or name in _REPLACED_MODULES:
        from agl_stream import _porting

        raise _porting.replaced_name("agl_stream", name) if name in _REPLACED_NAMES else _porting.replaced_module(
            f"agl_stream.{name}"
        )  # ImportError, not AttributeError: ``from agl_stream import X`` keeps this message
    else:
        raise AttributeError(f"module 'agl_stream' has no attribute {name!r}")
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
