"""What replaces the Agent Lightning 0.3 module paths and names that agl-stream does not keep.

A script ported by swapping ``agentlightning`` for ``agl_stream`` in its imports gets either
agl-stream's equivalent or an ``ImportError`` that names what to use instead:

* a replaced *module* (``agl_stream.store``, ``agl_stream.verl.daemon``...) has no file; the finder
  that ``agl_stream/__init__`` appends to ``sys.meta_path`` is asked only when no file exists and
  raises ``ModuleNotFoundError`` with :data:`REPLACED_MODULES`' text (a replaced package refuses its
  submodules too, since Python imports the parent first);
* a replaced *name* of a module that exists is refused by that module's ``__getattr__``, built by
  :func:`module_getattr` from :data:`REFUSED_NAMES` and :data:`REPLACED_NAMES`. It raises ``ImportError`` rather than
  ``AttributeError`` on purpose: ``from m import X`` replaces an ``AttributeError``'s message with
  a generic one, and the replacement is the point of the message.

The module table of ``docs/porting-from-agent-lightning.md`` lists every upstream path with its
status; ``tests/agl_stream/test_upstream_modules.py`` keeps it, this file and the package in step.
Standard library only: every module of the agent path may import it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional

UPSTREAM = "agentlightning"

_STORE = (
    "topics replace the store: an algorithm uses `agl_stream.client.StoreClient` (upstream's store methods over "
    "the pipeline; `trainer.fit` binds one as `Algorithm.get_store()`), clients and runners written for "
    "`LightningStoreClient` talk to the upstream-compatible REST front door `agl-stream ingest store`, and "
    "rollouts, attempts, spans and workers are ClickHouse tables (`agl-stream sql`)"
)
_V01 = (
    "the deprecated v0.1 HTTP client/server and their types have no counterpart: tasks are records on the "
    "`agl.tasks` topic (`agl_stream.client.StoreClient.enqueue_rollout`), resources on `agl.resources` "
    "(`StoreClient.add_resources`), runners are `agl-stream runner` processes"
)
_STRATEGY = (
    "execution strategies have no counterpart: `agl_stream.Trainer` starts the local stack (broker, stream "
    "processors, runner processes), `AGL_CURRENT_ROLE` splits algorithm and runners across machines, and "
    "`Trainer(strategy=...)` only contributes its `n_runners`"
)
_EVENT = (
    "the strategies' cross-process stop flag has no counterpart: `agl_stream.Trainer` and the agl-stream services "
    "stop on SIGTERM / Ctrl+C"
)
_QUERY = (
    "store query types have no counterpart: `agl_stream.client.StoreClient`'s queries take upstream's keyword "
    "filters and return an `agl_stream.client.PaginatedResult`; anything else is SQL on the ClickHouse tables "
    "(`agl-stream sql`)"
)
_RUNNER = (
    "runners are `agl-stream runner` processes running `agl_stream.LitAgentRunner` on `agl.tasks`; to debug one "
    "task use `agl_stream.Trainer.dev(agent, tasks)`"
)
_PROXY = (
    "the in-process LiteLLM proxy is a service here: run `agl-stream ingest proxy` (LiteLLM, captures token "
    "ids) and point the agent's `agl_stream.LLM` resource at it"
)
_INSTRUMENT = (
    "agl-stream's tracers instrument the installed LLM clients and agent frameworks themselves when they start "
    "(`agl_stream.instrumentation.instrument_installed`); there is no AgentOps/Weave/LiteLLM/vLLM patching"
)
_RECORDING = (
    "spans are recorded with `agl_stream.operation` (it yields an `agl_stream.emitter.OperationContext`) or "
    "with OpenTelemetry directly; the tracer routes them to the running attempt"
)
_ALGO_TYPES = (
    "typing aliases of the signatures `@algo` accepts have no counterpart: `agl_stream.algo` takes any sync "
    "or async function and injects its parameters by name"
)
_APO_INTERNALS = (
    "APO's internal types and prompt files have no counterpart: `agl_stream.APO` "
    "(`agl_stream_trainer.algorithms.apo`) keeps its own prompts and candidates"
)

#: upstream path below ``agentlightning`` -> why it is gone and what to use instead
REPLACED_MODULES: dict[str, str] = {
    "algorithm.utils": (
        "the algorithm helpers have no counterpart: `agl_stream.algorithm.run_dataset` runs a dataset through the "
        "pipeline, `Algorithm.get_store()` gives the `agl_stream.client.StoreClient`, the LLM proxy is "
        "`agl-stream ingest proxy`"
    ),
    "cli.prometheus": (
        "the `agl prometheus` command has no counterpart: each `agl-stream ingest` front door serves Prometheus "
        "metrics at /metrics, run metrics are in ClickHouse (`agl-stream dashboard`, the Grafana dashboard)"
    ),
    "cli.store": "the `agl store` server is `agl-stream ingest store` (upstream's store REST API over the pipeline)",
    "cli.vllm": (
        "the `agl vllm` command has no counterpart: serve the policy with vLLM as is and put `agl-stream ingest "
        "proxy` in front of it (it captures prompt and response token ids); `agl-stream trainer` runs its own engine"
    ),
    "execution.base": _STRATEGY,
    "execution.client_server": _STRATEGY,
    "execution.events": _EVENT,
    "execution.inter_process": _STRATEGY,
    "execution.shared_memory": _STRATEGY,
    "instrumentation.agentops": _INSTRUMENT,
    "instrumentation.agentops_langchain": _INSTRUMENT,
    "instrumentation.litellm": _INSTRUMENT,
    "instrumentation.vllm": _INSTRUMENT,
    "instrumentation.weave": _INSTRUMENT,
    "llm_proxy": _PROXY,
    "runner.base": _RUNNER,
    "runner.legacy": "the deprecated v0.1 runner has no counterpart: " + _RUNNER,
    "server": _V01,
    "store": _STORE,
    "tracer.weave": (
        "the Weave tracer has no counterpart: use `agl_stream.OtelTracer` (the default tracer) or export "
        "OTLP to `agl-stream ingest otlp`"
    ),
    "trainer.init_utils": (
        "the component-building helpers have no counterpart: `agl_stream.Trainer` accepts upstream's component "
        "specs (instance, class, dotted path, dict) and `agl_stream.algorithm.build_component(spec, default)` "
        "resolves one"
    ),
    "trainer.legacy": "the deprecated v0.1 trainer has no counterpart: use `agl_stream.Trainer`",
    "trainer.registry": _STRATEGY,
    "utils.metrics": (
        "the metrics backends have no counterpart: each `agl-stream ingest` front door serves Prometheus metrics "
        "at /metrics, the learner's metrics are on `agl.training_steps` and in ClickHouse"
    ),
    "utils.otel": (
        "upstream's OpenTelemetry helpers have no counterpart with the same signatures: agl-stream's attribute "
        "helpers are `agl_stream.tracer.attributes` (flatten_attributes, to_attribute_value) and "
        "`agl_stream.adapter.attributes` (group_indexed), tags and links go through `agl_stream.emit_annotation`"
    ),
    "utils.otlp": "OTLP export is received by `agl-stream ingest otlp`, which writes the spans to `agl.spans`",
    "utils.server_launcher": (
        "there is no in-process server launcher: agl-stream's servers are CLI services (`agl-stream ingest ...`, "
        "`agl-stream processors`, `agl-stream trainer`) and `agl_stream.Trainer` starts the local stack"
    ),
    "verl": (
        "the verl integration (agent-mode daemon, dataset, PPO entry point) has no counterpart: "
        "`agl_stream.VERL(config)` maps a verl config onto "
        "agl-stream's RL trainer (`agl_stream_trainer.rl`) for `agl_stream.Trainer.fit`, and `agl-stream "
        "trainer` runs it as a service"
    ),
}

#: upstream public name -> why it is gone and what to use instead (the same text wherever it is refused)
REPLACED_NAMES: dict[str, str] = {
    **dict.fromkeys(
        ("AgentLightningClient", "AgentLightningServer", "DevTaskLoader", "GenericResponse", "RolloutLegacy",
         "RolloutRawResultLegacy", "ServerDataStore", "Task", "TaskIfAny"),
        _V01,
    ),  # fmt: skip
    **dict.fromkeys(
        ("CollectionBasedLightningStore", "InMemoryLightningStore", "LightningStore", "LightningStoreClient",
         "LightningStoreServer", "LightningStoreThreaded"),
        _STORE,
    ),  # fmt: skip
    "LightningStoreCapabilities": (
        "store capability flags have no counterpart (the topics have no variants): "
        "`agl_stream.client.StoreClient.capabilities` answers upstream's questions"
    ),
    "LightningStoreStatistics": (
        "store counters have no counterpart: `agl_stream.client.StoreClient.statistics()`, "
        "`agl-stream sql --saved rollout_outcomes` and the Grafana dashboard"
    ),
    **dict.fromkeys(("FilterField", "FilterOptions", "SortOptions", "PaginatedResult"), _QUERY),
    **dict.fromkeys(
        ("ExecutionStrategy", "ClientServerExecutionStrategy", "SharedMemoryExecutionStrategy"), _STRATEGY
    ),
    **dict.fromkeys(("ExecutionEvent", "ThreadingEvent", "MultiprocessingEvent"), _EVENT),
    "Runner": "the runner base class (`step`/`iter`) has no counterpart: " + _RUNNER,
    "LegacyAgentRunner": "the deprecated v0.1 runner has no counterpart: " + _RUNNER,
    "LLMProxy": _PROXY,
    "build_component": (
        "upstream's component builder (with `expected_type`, `spec_name`...) has no counterpart: "
        "`agl_stream.Trainer` accepts upstream's component specs and `agl_stream.algorithm.build_component(spec, "
        "default)` resolves one"
    ),
    "lightning_cli": (
        "the argparse-from-constructors helper has no counterpart: agl-stream's command line is the `agl-stream` "
        "CLI and its settings are `agl_stream.config.Settings` (the `AGL_*` variables)"
    ),
    "convert_to_openai_messages": (
        "use `agl_stream.adapter.TraceToMessages().adapt(spans)`, which builds the OpenAI messages of each chat "
        "call of an attempt"
    ),
    "encode_object": "use `agl_stream.emit_object(obj, propagate=False).attributes` for an object's span attributes",
    "reward": "the deprecated `@reward` decorator has no counterpart: call `agl_stream.emit_reward(value)`",
    "with_active_tracer_context": (
        "agl-stream's tracers make themselves active for each attempt; outside an attempt use "
        "`agl_stream.set_active_tracer(tracer)`"
    ),
    "DummySpanRecordingContext": _RECORDING,
    "OtelSpanRecordingContext": _RECORDING,
    "LightningSpanProcessor": (
        "`agl_stream.tracer.install_global_processor()` puts agl-stream's processor on the OpenTelemetry provider; "
        "it routes finished spans to the running attempt's export pipeline"
    ),
    "STORE_WRITE_TIMEOUT_SECONDS": (
        "spans are not written to a store: `agl_stream.tracer.SpanExportPipeline` exports them (its timeouts are "
        "`agl_stream.config.Settings`)"
    ),
    "to_otel_status_code": "use `opentelemetry.trace.StatusCode[status_code]`",
    **dict.fromkeys(
        ("AGENTOPS_INSTALLED", "AGENTOPS_LANGCHAIN_INSTALLED", "LITELLM_INSTALLED", "VLLM_INSTALLED",
         "WEAVE_INSTALLED", "instrument_all", "uninstrument_all"),
        _INSTRUMENT,
    ),  # fmt: skip
    **dict.fromkeys(
        ("AlgorithmFunc", "AlgorithmFuncAsync", "AlgorithmFuncAsyncFallback", "AlgorithmFuncAsyncFull",
         "AlgorithmFuncAsyncLike", "AlgorithmFuncAsyncOnlyDataset", "AlgorithmFuncAsyncOnlyStore", "AlgorithmFuncSync",
         "AlgorithmFuncSyncFallback", "AlgorithmFuncSyncFull", "AlgorithmFuncSyncLike", "AlgorithmFuncSyncOnlyDataset",
         "AlgorithmFuncSyncOnlyStore", "AsyncFlag"),
        _ALGO_TYPES,
    ),  # fmt: skip
    **dict.fromkeys(
        ("APPLY_EDIT_PROMPT_FILES", "GRADIENT_PROMPT_FILES", "RolloutResultForAPO", "VersionedPromptTemplate"),
        _APO_INTERNALS,
    ),
}


def upstream_path(module: str) -> str:
    """``agl_stream.x.y`` -> ``agentlightning.x.y`` (what the user's original import said)."""
    return UPSTREAM + module[len("agl_stream") :]


def replaced_module(fullname: str) -> Optional[ModuleNotFoundError]:
    """The error for importing ``fullname`` (``agl_stream.…``) when it, or a package above it, is replaced."""
    parts = fullname.split(".")[1:]
    for end in range(1, len(parts) + 1):
        reason = REPLACED_MODULES.get(".".join(parts[:end]))
        if reason is not None:
            message = f"No module named {fullname!r}: upstream's {upstream_path(fullname)} is not kept; {reason}."
            return ModuleNotFoundError(message, name=fullname)
    return None


def replaced_name(module: str, name: str) -> ImportError:
    """The error for ``from <module> import <name>`` when ``name`` is one of :data:`REPLACED_NAMES`."""
    message = (
        f"cannot import name {name!r} from {module!r}: upstream's {upstream_path(module)}.{name} is not kept; "
        f"{REPLACED_NAMES[name]}."
    )
    return ImportError(message, name=module)


#: our module -> upstream's names it answers too -> the module that defines each (imported on first use,
#: so a module never imports what imports it, and agl_stream never imports a service package)
UPSTREAM_NAMES: dict[str, dict[str, str]] = {
    "agl_stream.adapter.base": {
        "OtelTraceAdapter": "agl_stream.adapter.upstream",
    },
    "agl_stream.algorithm": {
        "APO": "agl_stream_trainer.algorithms.apo",
        "VERL": "agl_stream_trainer.rl",
    },
    "agl_stream.algorithm.apo": {
        "APO": "agl_stream_trainer.algorithms.apo",
    },
    "agl_stream.algorithm.apo.apo": {
        "APO": "agl_stream_trainer.algorithms.apo",
    },
    "agl_stream.algorithm.verl": {
        "VERL": "agl_stream_trainer.rl",
    },
    "agl_stream.algorithm.verl.interface": {
        "VERL": "agl_stream_trainer.rl",
    },
    "agl_stream.emitter.annotation": {
        "OperationContext": "agl_stream.emitter.operation",
        "operation": "agl_stream.emitter.operation",
    },
    "agl_stream.types": {
        "Hook": "agl_stream.runner.hooks",
    },
    "agl_stream.types.core": {
        "Dataset": "agl_stream.types.upstream",
        "Hook": "agl_stream.runner.hooks",
        "ParallelWorkerBase": "agl_stream.types.upstream",
        "RolloutRawResult": "agl_stream.types.upstream",
        "Triplet": "agl_stream.types.triplets",
    },
}  # fmt: skip

#: our module -> upstream's names it refuses, with :data:`REPLACED_NAMES`' text
REFUSED_NAMES: dict[str, tuple[str, ...]] = {
    "agl_stream.adapter.messages": ("convert_to_openai_messages",),
    "agl_stream.algorithm.apo.apo": (
        "APPLY_EDIT_PROMPT_FILES", "GRADIENT_PROMPT_FILES", "RolloutResultForAPO", "VersionedPromptTemplate",
    ),
    "agl_stream.algorithm.decorator": (
        "AlgorithmFunc", "AlgorithmFuncAsync", "AlgorithmFuncAsyncFallback", "AlgorithmFuncAsyncFull",
        "AlgorithmFuncAsyncLike", "AlgorithmFuncAsyncOnlyDataset", "AlgorithmFuncAsyncOnlyStore",
        "AlgorithmFuncSync", "AlgorithmFuncSyncFallback", "AlgorithmFuncSyncFull", "AlgorithmFuncSyncLike",
        "AlgorithmFuncSyncOnlyDataset", "AlgorithmFuncSyncOnlyStore", "AsyncFlag",
    ),
    "agl_stream.client": ("AgentLightningClient", "DevTaskLoader",),
    "agl_stream.config": ("lightning_cli",),
    "agl_stream.emitter.object": ("encode_object",),
    "agl_stream.emitter.reward": ("reward",),
    "agl_stream.execution": (
        "ClientServerExecutionStrategy", "ExecutionEvent", "ExecutionStrategy", "MultiprocessingEvent",
        "SharedMemoryExecutionStrategy", "ThreadingEvent",
    ),
    "agl_stream.instrumentation": (
        "AGENTOPS_INSTALLED", "AGENTOPS_LANGCHAIN_INSTALLED", "LITELLM_INSTALLED", "VLLM_INSTALLED",
        "WEAVE_INSTALLED", "instrument_all", "uninstrument_all",
    ),
    "agl_stream.reward": ("reward",),
    "agl_stream.runner": ("LegacyAgentRunner", "Runner",),
    "agl_stream.tracer.base": ("with_active_tracer_context",),
    "agl_stream.tracer.dummy": ("DummySpanRecordingContext",),
    "agl_stream.tracer.otel": (
        "LightningSpanProcessor", "OtelSpanRecordingContext", "STORE_WRITE_TIMEOUT_SECONDS", "to_otel_status_code",
    ),
    "agl_stream.trainer": ("build_component",),
    "agl_stream.types": (
        "FilterField", "FilterOptions", "GenericResponse", "PaginatedResult", "RolloutLegacy",
        "RolloutRawResultLegacy", "SortOptions", "Task", "TaskIfAny",
    ),
    "agl_stream.types.core": (
        "FilterField", "FilterOptions", "GenericResponse", "PaginatedResult", "RolloutLegacy",
        "RolloutRawResultLegacy", "SortOptions", "Task", "TaskIfAny",
    ),
}  # fmt: skip


def module_getattr(module: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` (PEP 562) for ``module``, from the tables above: its
    :data:`UPSTREAM_NAMES` are imported on first use and cached in the module; its :data:`REFUSED_NAMES`
    raise :func:`replaced_name`'s error; anything else is the usual ``AttributeError``."""
    refused = frozenset(REFUSED_NAMES.get(module, ()))
    unknown = refused - REPLACED_NAMES.keys()
    if unknown:
        raise KeyError(f"{module}: no replacement text for {sorted(unknown)}")
    lazy = dict(UPSTREAM_NAMES.get(module, {}))

    def __getattr__(name: str) -> Any:
        if name in lazy:
            namespace = importlib.import_module(module).__dict__
            try:
                value = getattr(importlib.import_module(lazy[name]), name)
            except ModuleNotFoundError as exc:
                if lazy[name].startswith("agl_stream."):
                    raise
                # the learning algorithms live in the trainer service package (torch, an LLM client)
                raise ImportError(
                    f"{module}.{name} needs the 'trainer' extra: pip install 'agl-stream[trainer]' ({exc})", name=module
                ) from exc
            namespace[name] = value  # resolved once
            return value
        if name in refused:
            raise replaced_name(module, name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
