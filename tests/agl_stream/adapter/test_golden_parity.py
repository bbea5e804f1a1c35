"""agl-stream's adapters give Agent Lightning 0.3.0's answers on upstream's own spans (issue 13).

The golden corpus (``tests/agl_stream/adapter/golden/corpus.json``) holds rollouts recorded by
upstream's own runner, tracers (AgentOpsTracer with a real OpenAI client, OtelTracer) and LLM proxy,
each with upstream's own derivations: final reward, reward list and dimensions,
``TracerTraceToTriplet`` under every ``RewardMatchPolicy`` / ``agent_match`` / ``repair_hierarchy``,
``LlmProxyTraceToTriplet`` and ``TraceToMessages``. Here every case is adapted by agl-stream as
upstream's store returned it and after every delivery an exporter can make (creation order, end
order, shuffled; with and without sequence ids), and must give upstream's stored-order answer each
time. ``test_golden_roundtrip.py`` does the same after the OTLP receiver and ClickHouse.

Regenerate the corpus (creates a side venv with agentlightning==0.3.0, never a dependency of
agl-stream; needs the package index once) with one command from the repository root::

    make golden        # = python3 -m tests.agl_stream.adapter.golden.generate
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agl_stream.adapter import TracerTraceToTriplet
from tests.agl_stream.adapter.golden.cases import GoldenCase, differences, golden_cases, load_corpus
from tests.agl_stream.adapter.golden.spec import (
    CORPUS_PATH,
    DELIVERIES,
    ORDERS,
    REQUIRED_SHAPES,
    UPSTREAM_VERSION,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
CASES = golden_cases()
STORED = "stored"  # the spans exactly as upstream's store returned them


def test_corpus_covers_every_shape_issue_13_names() -> None:
    corpus = load_corpus()
    assert corpus["required_shapes"] == list(REQUIRED_SHAPES)
    covered = {shape for case in corpus["cases"] for shape in case["shapes"]}
    assert not set(REQUIRED_SHAPES) - covered, f"shapes without a case: {sorted(set(REQUIRED_SHAPES) - covered)}"
    assert corpus["deliveries"] == list(DELIVERIES)
    assert set(ORDERS) == {"creation", "end", "shuffled"}


LLM_NAMES = {"openai.chat.completion", "raw_gen_ai_request", "litellm_request"}


def _shape_holds(shape: str, case: GoldenCase) -> bool:
    """What a shape tag claims, checked on the recorded spans and upstream's answers."""
    spans = case.spans
    by_id = {s.span_id: s for s in spans}
    llm = [s for s in spans if s.name in LLM_NAMES]
    calls = [s for s in spans if s.name in ("openai.chat.completion", "raw_gen_ai_request")]
    rewards = case.expected("reward_list")
    reward_ids = set(case.expected("reward_span_ids"))
    agents = {s.span_id for s in spans
              if "agent.name" in s.attributes or s.attributes.get("agentops.span.kind") == "agent"}  # fmt: skip
    response_ids = [s.attributes.get("gen_ai.response.id") or s.attributes.get("llm.hosted_vllm.id") for s in calls]
    response_ids = [r for r in response_ids if r]
    checks = {
        "nested_agents": lambda: any(s.span_id in agents and s.parent_id in agents for s in spans),
        "multiple_llm_calls": lambda: len(calls) >= 2,
        "reward_none": lambda: not rewards and case.expected("final_reward") is None,
        "reward_intermediate": lambda: len(rewards) >= 2,
        "reward_final": lambda: case.expected("final_reward") is not None,
        "reward_multi_dimensional": lambda: any(len(d) >= 2 for d in case.expected("reward_dimensions")),
        "reward_before_any_call": lambda: any(
            by_id[r].end_time < min(c.start_time for c in calls) for r in reward_ids  # type: ignore[operator]
        ),
        "llm_otel_shaped": lambda: any(s.attributes.get("gen_ai.system") == "openai" for s in llm),
        "llm_agentops_shaped": lambda: any(s.resource.attributes.get("service.name") == "agentops" for s in llm),
        "llm_proxy_shaped": lambda: any(s.name == "raw_gen_ai_request" for s in llm),
        "several_trace_ids": lambda: len({s.trace_id for s in spans}) >= 2,
        "duplicated_response_ids": lambda: len(response_ids) > len(set(response_ids)),
        "streaming_call": lambda: any(s.attributes.get("gen_ai.request.streaming") is True for s in llm),
    }
    return checks[shape]()


def test_every_case_really_has_the_shapes_it_is_tagged_with() -> None:
    wrong = [(case.name, shape) for case in CASES for shape in case.data["shapes"]
             if shape in REQUIRED_SHAPES and not _shape_holds(shape, case)]  # fmt: skip
    assert not wrong


def test_corpus_was_recorded_by_upstream_and_is_well_formed() -> None:
    corpus = load_corpus()
    assert corpus["upstream_versions"]["agentlightning"] == UPSTREAM_VERSION
    assert CORPUS_PATH.stat().st_size < 2_000_000
    names = [case.name for case in CASES]
    assert len(names) == len(set(names)) and len(names) >= 15
    for case in CASES:
        spans = case.spans
        assert spans, case.name
        assert len({(s.rollout_id, s.attempt_id) for s in spans}) == 1, case.name
        for order in ORDERS:
            assert sorted(case.data["orders"][order]) == list(range(len(spans))), (case.name, order)
        # the orders differ where exporters differ: children end before their parents
        assert case.data["orders"]["creation"] != case.data["orders"]["end"] or len(spans) <= 2, case.name
        assert case.intrinsic <= {s.span_id for s in spans}
        keys = ("final_reward", "reward_list", "reward_dimensions", "tracer_triplets", "proxy_triplets", "messages")
        assert set(keys) <= set(case.data["upstream"]), case.name


def test_regenerating_is_one_command() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "\ngolden:" in makefile and "-m tests.agl_stream.adapter.golden.generate" in makefile
    assert "make golden" in load_corpus()["regenerate"]
    done = subprocess.run([sys.executable, "-m", "tests.agl_stream.adapter.golden.generate", "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--venv" in done.stdout and "agentlightning 0.3.0" in done.stdout


@pytest.mark.parametrize("delivery", (STORED,) + DELIVERIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_adapters_give_upstreams_answers_whatever_the_delivery(case: GoldenCase, delivery: str) -> None:
    spans = case.spans if delivery == STORED else case.delivered(delivery)
    problems = differences(case, spans, None if delivery == STORED else delivery)
    assert not problems, f"{case.name} delivered {delivery}:\n" + "\n".join(problems)


def test_deliveries_change_upstreams_own_answers_so_they_test_something() -> None:
    """Upstream, fed the same spans in another arrival order, answers differently in places; the
    corpus records where (agl-stream must not, as the test above checks)."""
    moved = {(case.name, delivery, key) for case in CASES
             for delivery, keys in case.data["upstream_by_delivery"].items() for key in keys}  # fmt: skip
    keys = {key for _, _, key in moved}
    assert {"tracer_triplets", "final_reward", "messages", "proxy_triplets"} <= keys, keys
    assert any(delivery.startswith("creation/") for _, delivery, _ in moved)


def test_issue_13_last_call_keeps_the_intermediate_reward_when_spans_arrive_in_end_order() -> None:
    """The reported bug: two calls, 0.5 after the first, 0.9 after the second, final reward 1.0;
    delivered as exporters do (end order, no sequence ids) the last call must get 0.9, not 1.0."""
    case = next(c for c in CASES if c.name == "agentops_intermediate_then_final")
    bodies = case.expected("triplet_bodies")
    assert case.expected("final_reward") == 1.0
    for delivery in DELIVERIES:
        triplets = TracerTraceToTriplet().adapt(case.delivered(delivery))
        assert [t.reward for t in triplets] == [0.5, 0.9], delivery
        assert [t.metadata["response_id"] for t in triplets] == [b["metadata"]["response_id"] for b in bodies], delivery
