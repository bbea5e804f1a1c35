"""What the golden parity corpus must hold (standard library only: the generator imports it too)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS_PATH = HERE / "corpus.json"
CONSTRAINTS_PATH = HERE / "agentlightning-0.3.0-constraints.txt"
RECORDER_PATH = HERE / "record.py"
REGENERATE_COMMAND = "make golden  (or: python3 -m tests.agl_stream.adapter.golden.generate)"
UPSTREAM_VERSION = "0.3.0"
FORMAT_VERSION = 1

#: Shapes issue 13 names; every one must be carried by at least one case.
REQUIRED_SHAPES: tuple[str, ...] = (
    "nested_agents",
    "multiple_llm_calls",
    "reward_none",
    "reward_intermediate",
    "reward_final",
    "reward_multi_dimensional",
    "reward_before_any_call",
    "llm_otel_shaped",
    "llm_agentops_shaped",
    "llm_proxy_shaped",
    "several_trace_ids",
    "duplicated_response_ids",
    "streaming_call",
)

#: The framework golden cases (``generate_frameworks.py``): each framework's LLM calls, recorded from the real
#: agent, and upstream's answer for the same calls made through its own runner and tracers.
FRAMEWORKS_PATH = HERE / "frameworks.json"
FRAMEWORKS_REGENERATE_COMMAND = "make golden  (or: python3 -m tests.agl_stream.adapter.golden.generate_frameworks)"
#: pins of the framework SDKs upstream's replay needs beside agentlightning 0.3.0 (``.agl/upstream-frameworks-venv``)
UPSTREAM_FRAMEWORKS_CONSTRAINTS_PATH = HERE / "upstream-frameworks-constraints.txt"
#: Frameworks the corpus must hold a case of (the case's ``framework``, also one of its shapes).
REQUIRED_FRAMEWORKS: tuple[str, ...] = (
    "framework_openai_agents",
    "framework_litellm",
    "framework_anthropic",
    "framework_langgraph",
    "framework_autogen",
    "framework_crewai",
)

#: Arrival orders every case is delivered in, each with and without sender-supplied sequence ids.
ORDERS: tuple[str, ...] = ("creation", "end", "shuffled")
SEQUENCE_MODES: tuple[str, ...] = ("sequence_ids", "no_sequence_ids")
DELIVERIES: tuple[str, ...] = tuple(f"{o}/{m}" for o in ORDERS for m in SEQUENCE_MODES)
