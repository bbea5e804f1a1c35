"""Each framework's LLM calls give agl-stream the triplets Agent Lightning 0.3.0 derives for the same calls.

The framework golden corpus (``tests/agl_stream/adapter/golden/frameworks.json``, ``make golden``) holds, per
framework agent, the LLM calls it made (requests and the scripted engine's answers), the reward it returned,
and upstream's answer for those very calls made again through upstream's own runner and tracers
(``record_frameworks.py``): ``agentops`` (``AgentOpsTracer``, ``TracerTraceToTriplet()``) and ``proxy``
(``LLMProxy``, ``LlmProxyTraceToTriplet``). Here each agent runs again under agl-stream's tracer, as a runner
runs it, against a server answering with the recorded responses and refusing any request but the recorded
one, so agl-stream's spans are of the same calls; agl-stream's ``TracerTraceToTriplet()`` triplets of them
must carry upstream's token ids, rewards and response ids in upstream's order, and, where upstream's AgentOps
spans record the conversation, the same messages.

Where the answers differ for a known reason the difference is named in :data:`DEPARTURES` (agl-stream's) or
asserted as upstream's own gap (its AgentOps tracer records no token ids of streamed calls, fails litellm's
streams, and matches no Anthropic call); a departure that no longer shows fails the test, so its entry goes
with the fix.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from agl_stream.adapter import TracerTraceToTriplet
from agl_stream.types import Span, Triplet
from tests.agl_stream.adapter.golden.frameworks import CASES_BY_NAME, CaseRun, frameworks_venv_python, run_cases
from tests.agl_stream.adapter.golden.spec import FRAMEWORKS_PATH, REQUIRED_FRAMEWORKS, UPSTREAM_VERSION

#: the frameworks of the main venv's cases (looked up, not imported: the agents run in processes of their own)
_MISSING = [m for m in ("litellm", "anthropic", "agents", "langgraph", "langchain_openai") if find_spec(m) is None]
if _MISSING:
    pytest.skip(f"frameworks not installed: {_MISSING} (make setup)", allow_module_level=True)

REPO_ROOT = Path(__file__).resolve().parents[3]
CORPUS: dict[str, Any] = json.loads(FRAMEWORKS_PATH.read_text())
CASES: list[dict[str, Any]] = CORPUS["cases"]

#: agl-stream's known departures from upstream's answer for these calls (checked to still show, see the module doc)
DEPARTURES = {
    "hosted_vllm_stream_prompt_ids": (
        "litellm 1.106 drops vLLM's prompt ids from hosted_vllm streams (docs/frameworks.md, note 1): those "
        "triplets have no prompt ids; upstream's proxy, which makes the call a plain one, keeps them"
    ),
}


def _streamed(exchange: dict[str, Any]) -> bool:
    return bool(exchange["request"].get("stream"))


def core_view(triplet: dict[str, Any]) -> dict[str, Any]:
    """What training reads of a triplet: its token ids, reward and call."""
    return {"prompt_token_ids": triplet["prompt"].get("token_ids"),
            "response_token_ids": triplet["response"].get("token_ids"),
            "reward": triplet["reward"], "response_id": triplet["metadata"].get("response_id")}  # fmt: skip


def _prompt_message(message: dict[str, Any]) -> dict[str, Any]:
    view = {"role": message.get("role"), "content": message.get("content")}
    if message.get("tool_calls"):
        view["tool_calls"] = message["tool_calls"]
    if "tool_call_id" in message:
        view["tool_call_id"] = message["tool_call_id"]
    return view


def conversation_differences(ours: dict[str, Any], upstream: dict[str, Any], seen: Counter[str]) -> list[str]:
    """Where the prompt messages or the reply of two triplets of one call differ. The reply is compared on what
    upstream's AgentOps records of it: a tool-calling reply has neither text nor tool calls there."""
    problems = []
    ours_prompt = [_prompt_message(m) for m in ours["prompt"]["raw_content"]]
    upstream_prompt = [_prompt_message(m) for m in upstream["prompt"]["raw_content"]]
    if ours_prompt != upstream_prompt:
        problems.append(f"prompt messages:\n    upstream   {upstream_prompt}\n    agl-stream {ours_prompt}")
    ours_reply, upstream_reply = ours["response"]["raw_content"], upstream["response"]["raw_content"]
    if len(ours_reply) != len(upstream_reply):
        return problems + [f"replies:\n    upstream   {upstream_reply}\n    agl-stream {ours_reply}"]
    for mine, theirs in zip(ours_reply, upstream_reply):
        keys = ["role", "finish_reason", *(["content"] if "content" in theirs else [])]
        if {k: mine.get(k) for k in keys} != {k: theirs.get(k) for k in keys}:
            problems.append(f"reply:\n    upstream   {theirs}\n    agl-stream {mine}")
    return problems


def _available(case: dict[str, Any]) -> bool:
    return CASES_BY_NAME[case["name"]].python == "main" or frameworks_venv_python().exists()


@pytest.fixture(scope="module")
def runs() -> dict[str, CaseRun]:
    """Every case's agent once more under agl-stream's tracer, against the recorded answers."""
    cases = [CASES_BY_NAME[c["name"]] for c in CASES if _available(c)]
    return run_cases(cases, {c["name"]: c["exchanges"] for c in CASES})


def our_triplets(run: CaseRun) -> list[dict[str, Any]]:
    """agl-stream's triplets of the run's spans, as upstream's triplets are laid out (JSON)."""
    triplets: list[Triplet] = TracerTraceToTriplet().adapt([Span.model_validate(s) for s in run.spans])
    return [json.loads(json.dumps(t.model_dump(mode="json"))) for t in triplets]


def differences(case: dict[str, Any], run: CaseRun, seen: Counter[str]) -> list[str]:
    """Every way agl-stream's triplets of the case's calls depart from upstream's answers, known ones counted in
    ``seen`` instead."""
    ours = our_triplets(run)
    exchanges = case["exchanges"]
    problems: list[str] = []
    # upstream's proxy: token ids, rewards and calls of every case, streamed calls included
    proxy = [core_view(t) for t in case["upstream"]["proxy"]["triplets"]]
    mine = [core_view(t) for t in ours]
    for view, theirs, exchange in zip(mine, proxy, exchanges):
        hosted_stream = case["provider"] == "hosted_vllm" and _streamed(exchange)
        if hosted_stream and view["prompt_token_ids"] == [] and theirs["prompt_token_ids"]:
            seen["hosted_vllm_stream_prompt_ids"] += 1
            view["prompt_token_ids"] = theirs["prompt_token_ids"]
    if mine != proxy:
        problems.append(f"triplets vs upstream's LLMProxy answer:\n    upstream   {proxy}\n    agl-stream {mine}")
    # upstream's AgentOps tracer: the same, where it records them, and the conversation
    agentops = case["upstream"]["agentops"]
    if case["api"] == "chat" and "error" not in agentops:
        theirs_all = agentops["triplets"]
        if len(theirs_all) != len(ours):
            return problems + [f"{len(ours)} triplets, upstream's AgentOps answer has {len(theirs_all)}"]
        for k, (mine_t, theirs_t, exchange) in enumerate(zip(ours, theirs_all, exchanges)):
            a, b = core_view(mine_t), core_view(theirs_t)
            if not b["prompt_token_ids"] and not b["response_token_ids"]:  # upstream's gap: asserted, not compared
                assert _streamed(exchange), f"{case['name']} call {k}: upstream's AgentOps lost the ids of a plain call"
                a["prompt_token_ids"], a["response_token_ids"] = b["prompt_token_ids"], b["response_token_ids"]
            if a != b:
                problems.append(f"call {k} vs upstream's AgentOps answer:\n    upstream   {b}\n    agl-stream {a}")
            problems += [f"call {k}, {p}" for p in conversation_differences(mine_t, theirs_t, seen)]
    return problems


# ---------------------------------------------------------------------------------------------- the corpus


def test_corpus_was_recorded_by_upstream_for_every_framework() -> None:
    assert CORPUS["upstream_versions"]["agentlightning"] == UPSTREAM_VERSION
    assert CORPUS["required_frameworks"] == list(REQUIRED_FRAMEWORKS)
    assert set(REQUIRED_FRAMEWORKS) <= {case["framework"] for case in CASES}
    assert FRAMEWORKS_PATH.stat().st_size < 1_000_000
    for case in CASES:
        assert case["framework"] in case["shapes"] and case["name"].startswith(case["framework"]), case["name"]
        assert set(case["upstream"]) == {"agentops", "proxy"}, case["name"]
        assert case["exchanges"] and case["reward"] is not None, case["name"]
        if case["api"] == "messages":
            assert len(case["messages_requests"]) == len(case["exchanges"]), case["name"]


def test_the_case_registry_is_the_recorded_one() -> None:
    """A case changed in ``frameworks.py`` (agent, task, client) needs ``make golden`` before its test means
    anything."""
    for case in CASES:
        registered = CASES_BY_NAME[case["name"]]
        recorded = {k: case[k] for k in ("agent", "task", "api", "client", "provider", "python", "script", "env")}
        assert recorded == {k: getattr(registered, k) for k in recorded}, f"{case['name']}: run `make golden`"
    assert sorted(CASES_BY_NAME) == sorted(case["name"] for case in CASES), "run `make golden`"


def test_regenerating_is_one_command() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "-m tests.agl_stream.adapter.golden.generate_frameworks" in makefile
    assert "make golden" in CORPUS["regenerate"]
    done = subprocess.run([sys.executable, "-m", "tests.agl_stream.adapter.golden.generate_frameworks", "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--venv" in done.stdout and "--agl-python" in done.stdout


def test_upstreams_agentops_tracer_has_no_token_ids_for_streams_nor_anthropic_calls() -> None:
    """Upstream's own gaps, as recorded: its AgentOps tracer records no token ids of streamed OpenAI calls, fails
    litellm's streams (its stream wrapper is not what litellm's raw-response path parses), and records Anthropic
    calls as ``anthropic.messages.create`` spans without token ids, which its default ``llm_call_match`` skips."""
    for case in CASES:
        agentops = case["upstream"]["agentops"]
        streamed = [_streamed(e) for e in case["exchanges"]]
        if "error" in agentops:
            assert case["client"] == "litellm" and all(streamed), case["name"]
            assert "OpenaiStreamWrapper" in agentops["error"], agentops["error"]
        elif case["api"] == "messages":
            assert re.search(agentops["llm_call_match"], "anthropic.messages.create")
            assert not re.search(TracerTraceToTriplet().llm_call_match, "anthropic.messages.create")
            assert all(not t["prompt"]["token_ids"] and not t["response"]["token_ids"] for t in agentops["triplets"])
        else:
            for triplet, is_stream in zip(agentops["triplets"], streamed):
                assert bool(triplet["response"]["token_ids"]) is not is_stream, case["name"]


# ---------------------------------------------------------------------------------------------- agl-stream


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_the_agent_makes_the_recorded_calls_again(case: dict[str, Any], runs: dict[str, CaseRun]) -> None:
    if case["name"] not in runs:
        pytest.skip(f"{case['name']} runs in {frameworks_venv_python()}, which is missing: run `make frameworks-venv`")
    run = runs[case["name"]]
    assert not run.refused, f"the agent's calls are not the recorded ones (`make golden` if it changed): {run.refused}"
    assert run.received == [e["request"] for e in case["exchanges"]]
    assert run.front_requests == case["messages_requests"]
    assert run.result == case["reward"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_triplets_of_the_frameworks_spans_are_upstreams(case: dict[str, Any], runs: dict[str, CaseRun]) -> None:
    if case["name"] not in runs:
        pytest.skip(f"{case['name']} runs in {frameworks_venv_python()}, which is missing: run `make frameworks-venv`")
    problems = differences(case, runs[case["name"]], Counter())
    assert not problems, f"{case['name']}:\n" + "\n".join(problems)


def test_every_known_departure_still_shows(runs: dict[str, CaseRun]) -> None:
    """Each :data:`DEPARTURES` entry is seen in the corpus's calls; one that no longer shows was fixed: drop it."""
    seen: Counter[str] = Counter()
    for case in CASES:
        if case["name"] in runs:
            differences(case, runs[case["name"]], seen)
    assert set(seen) == set(DEPARTURES), {"declared": sorted(DEPARTURES), "seen": dict(seen)}
