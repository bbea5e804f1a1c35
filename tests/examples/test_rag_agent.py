"""The rag example on the local stack: ``Trainer.fit`` starts the broker, the processors (with the embedded
ClickHouse) and a runner process; each rollout starts the MCP retriever over stdio; the LLM is a scripted
vLLM-style server.

Nothing in the agent mentions tracing: the runner's instrumentations record both LLM calls of each
rollout (token ids included) and the MCP ``retrieve`` call as a tool span (the query, the passages, an
error status when the tool returns ``isError``), with the MCP SDK's own request span under it. The
triplets are the LLM calls, rewarded with the answer's F1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.trainer import Trainer
from agl_stream.types import LLM
from tests.agl_stream.scripted_vllm import ScriptedVllm, prompt_text, token_ids

pytest.importorskip("mcp")
pytest.importorskip("bm25s")

DATA = Path(__file__).resolve().parents[2] / "examples" / "rag" / "data"
# question -> (what the scripted model searches for, what it answers once it has read the passages)
SCRIPT = {
    "Who built Harrow Lighthouse?": ("Harrow Lighthouse built", "Ada Quill"),  # right: F1 1
    "How many singers does the Island Choir have?": ("Island Choir singers", "The choir has 48 singers"),  # F1 2/5
    "What is Brannock wool dyed with?": ("xyzzy plugh", "I do not know"),  # no query word in the corpus: isError
}


def question_of(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user" and m["content"] in SCRIPT)


def answer(body: dict[str, Any]) -> str:
    search, reply = SCRIPT[question_of(body)]
    return reply if body["messages"][-1]["content"].startswith(("RESULTS", "ERROR")) else f"SEARCH {search}"


def test_protocol_and_scoring() -> None:
    from examples.rag.protocol import exact_match, f1, parse_search, score

    assert parse_search("SEARCH Who built Harrow Lighthouse?\nmore") == "Who built Harrow Lighthouse?"
    assert parse_search("search it") is None and parse_search("SEARCH ") is None and parse_search("Ada Quill") is None
    assert exact_match("The Grey Crown.", "the Grey Crown") == 1.0 and exact_match("Grey", "the Grey Crown") == 0.0
    assert f1("The choir has 48 singers", "48") == pytest.approx(0.4) and f1("", "48") == 0.0
    found = score("Ada Quill", "Ada Quill", searched=True, results="[1] Harrow Lighthouse: ...", title="Harrow Lighthouse")
    assert found.as_rewards() == {"f1": 1.0, "correct": 1.0, "searched": 1.0, "retrieved": 1.0}
    assert score("Ada", "Ada Quill", searched=False, results=None, title="Harrow Lighthouse").retrieved == 0.0


def test_retriever_tool_answers_and_errors() -> None:
    """In-process: the best passage first; an empty query, a bad k or no corpus word is an isError result."""
    import asyncio

    from mcp import Client

    from examples.rag.retriever_mcp import build_server

    async def calls() -> list[Any]:
        async with Client(build_server()) as client:
            return [await client.call_tool("retrieve", args) for args in (
                {"query": "Who built Harrow Lighthouse?", "k": 2}, {"query": " "}, {"query": "bridge", "k": 9},
                {"query": "xyzzy"})]  # fmt: skip

    ok, empty, bad_k, unknown = asyncio.run(calls())
    lines = ok.content[0].text.splitlines()
    assert not ok.is_error and len(lines) == 2 and lines[0].startswith("[1] Harrow Lighthouse: ")
    assert all(r.is_error for r in (empty, bad_k, unknown))
    assert [r.content[0].text.split(": ", 1)[1] for r in (empty, bad_k, unknown)] == [
        "the query is empty", "k must be between 1 and 5, not 9", "no word of the query 'xyzzy' is in the corpus"]


@pytest.mark.integration
@pytest.mark.slow
def test_rag_agent_tool_spans_and_triplets(tmp_path: Path) -> None:
    from agl_stream_processors.clickhouse import connect

    rows = [json.loads(line) for name in ("train", "val") for line in (DATA / f"{name}.jsonl").read_text().splitlines()]
    tasks = [next(r for r in rows if r["question"] == q) for q in SCRIPT]
    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    with ScriptedVllm(answer) as server:
        trainer = Trainer(n_runners=1, settings=settings,
                          initial_resources={"llm": LLM(endpoint=server.base_url, model="policy")})  # fmt: skip
        report = trainer.fit("examples.rag.agent:rag_agent", tasks)
    assert report["train"]["succeeded"] == 3, report
    assert len(server.requests) == 6 and all(r["return_token_ids"] for r in server.requests)

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        _, tools = ch.query_rows(
            "SELECT SpanName, SpanAttributes['tool.name'], SpanAttributes['input.value'], SpanAttributes['output.value'], "
            "StatusCode, StatusMessage, SpanId, RolloutId FROM spans FINAL "
            "WHERE SpanAttributes['openinference.span.kind'] = 'TOOL' ORDER BY SpanAttributes['input.value']")
        _, requests = ch.query_rows("SELECT ParentSpanId FROM spans FINAL WHERE SpanName = 'MCP send tools/call retrieve'")
        _, triplets = ch.query_rows("SELECT RolloutId, PromptTokenIds, ResponseTokenIds, Reward FROM triplets FINAL "
                                    "WHERE Decision = 'final'")  # fmt: skip
    finally:
        ch.close()

    assert [(t[0], t[1], json.loads(t[2])) for t in tools] == [
        ("retrieve.tool", "retrieve", {"query": "Harrow Lighthouse built", "k": 1}),
        ("retrieve.tool", "retrieve", {"query": "Island Choir singers", "k": 1}),
        ("retrieve.tool", "retrieve", {"query": "xyzzy plugh", "k": 1}),
    ]
    harrow, choir, missing = tools
    assert harrow[3].startswith("[1] Harrow Lighthouse: ") and choir[3].startswith("[1] Island Choir: ")
    assert harrow[4] == choir[4] == "Unset" and missing[4] == "Error" and "no word of the query" in missing[5]
    assert sorted(r[0] for r in requests) == sorted(t[6] for t in tools)  # the SDK's request span nests under it

    expected = {tuple(token_ids(prompt_text(r))): token_ids(answer(r)) for r in server.requests}
    assert len(triplets) == 6  # the search call and the answer call of each rollout
    for _, prompt_ids, response_ids, _ in triplets:
        assert list(response_ids) == expected[tuple(prompt_ids)]
    for tool in tools:  # the answer call's prompt ends with the tool turn: the passages the tool span recorded
        turn = token_ids(("ERROR " if tool[4] == "Error" else "RESULTS\n") + tool[3])
        assert sum(list(t[1][-len(turn):]) == turn for t in triplets if t[0] == tool[7]) == 1
    reward_of = {t[7]: None for t in tools}
    for rollout_id, *_, reward in triplets:
        reward_of[rollout_id] = reward
    assert [round(reward_of[t[7]], 3) for t in tools] == [1.0, 0.4, 0.0]
