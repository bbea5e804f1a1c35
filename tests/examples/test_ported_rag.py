"""Agent Lightning's RAG agent, ported (examples/ported/rag): an OpenAI Agents SDK agent with an MCP retriever over SSE.

The integration test runs ``RAGAgent`` as ``train_rag.py`` does: the retriever (``wiki_retriever_mcp.py``)
as a child process serving SSE (``train_rag.retriever_server``), the agent object through
``agl.Trainer(n_runners=1).fit`` with the default ``Baseline`` on the local stack (broker, processors,
embedded ClickHouse, a runner process). The model is a scripted vLLM-style server (``ToolVllm``) that
calls ``retrieve`` and then answers from the result, so each rollout is two LLM calls: the tool call,
and the answer whose prompt ends with the retrieved chunks. The substitutions are that server instead
of the policy's engine and ``Baseline`` instead of ``agl.RL``. The script's evaluation read-back
(``evaluation_details``) runs on the same tables.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from agl_stream import Settings, Trainer
from agl_stream.types import LLM
from tests.agl_stream.instrumentation.frameworks.pipeline import returned_pairs
from tests.agl_stream.instrumentation.frameworks.servers import Reply, ToolCall, ToolVllm, reply_text
from tests.agl_stream.scripted_vllm import token_ids

pytest.importorskip("agents")
pytest.importorskip("mcp")
pytest.importorskip("bm25s")

HERE = Path(__file__).resolve().parents[2] / "examples" / "ported" / "rag"
DATA = Path(__file__).resolve().parents[2] / "examples" / "rag" / "data"
# question -> (what the scripted model searches for, the passage found first, its final output)
SCRIPT = {
    "Who built Harrow Lighthouse?": ("Harrow Lighthouse", "Harrow Lighthouse",
                                     "The lighthouse was built by Ada Quill. <answer>Ada Quill</answer>"),
    "How many singers does the Island Choir have?": ("Island Choir singers", "Island Choir",
                                                     "<answer>The choir has 48 singers</answer>"),
    "What is Brannock wool dyed with?": ("xyzzy plugh", None, "The search found nothing, so I cannot say."),
}  # fmt: skip
REWARDS = [1.0, 0.4, 0.0]  # F1 of the tagged answer: right; 2/5 of a sentence; no tags (after a tool error)


@pytest.fixture
def port_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example's folder importable, as it is for ``python train_rag.py`` (its modules import each other)."""
    monkeypatch.syspath_prepend(str(HERE))
    return HERE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scripted_model(body: dict[str, Any]) -> Reply:
    """First call: ``retrieve`` with the scripted query; after the tool's turn: the scripted final output."""
    question = next(q for q in SCRIPT if any(m.get("content") == q for m in body["messages"]))
    query, _, final = SCRIPT[question]
    if body["messages"][-1].get("role") != "tool":
        assert [t["function"]["name"] for t in body.get("tools") or []] == ["retrieve"], body.get("tools")
        return ToolCall("retrieve", {"query": query})
    return final


def tool_blocks(turn: str) -> list[str]:
    """The texts of the MCP result as the SDK hands it to the model (one content block's JSON, or a list of them)."""
    parsed = json.loads(turn)
    return [block["text"] for block in (parsed if isinstance(parsed, list) else [parsed])]


def test_compute_scores_is_f1_of_the_tagged_answer(port_dir: Path) -> None:
    from utils import compute_scores, exact_match_score, extract_answer, f1_score

    assert extract_answer("I think <answer>old</answer> no, <answer>Ada Quill</answer>.") == "Ada Quill"
    assert extract_answer("Ada Quill") == extract_answer("<answer>Ada") == extract_answer(None) == ""
    assert compute_scores("so: <answer>The Ada Quill.</answer>", "Ada Quill") == 1.0
    assert compute_scores("Ada Quill", "Ada Quill") == 0.0  # no tags, no reward
    assert compute_scores("<answer>The choir has 48 singers</answer>", "48") == pytest.approx(0.4)
    assert f1_score("no", "yes") == (0.0, 0.0, 0.0) and f1_score("yes", "yes")[0] == 1.0
    assert exact_match_score("the Grey Crown!", "Grey Crown") and not exact_match_score("Grey", "Grey Crown")


def test_retriever_tool_returns_upstreams_chunks(port_dir: Path) -> None:
    """In-process: upstream's tool name and result shape (at most 4, best first); what BM25 cannot answer is an error."""
    from mcp import Client
    from wiki_retriever_mcp.wiki_retriever_mcp import TOP_K, build_mcp

    async def calls() -> tuple[Any, list[Any]]:
        async with Client(build_mcp()) as client:
            tools = (await client.list_tools()).tools
            return tools, [await client.call_tool("retrieve", {"query": q}) for q in ("Who built Harrow Lighthouse?", " ", "xyzzy")]

    tools, (found, empty, unknown) = asyncio.run(calls())
    assert [t.name for t in tools] == ["retrieve"] and list(tools[0].input_schema["properties"]) == ["query"]
    chunks = [json.loads(block.text) for block in found.content]
    assert not found.is_error and len(chunks) == 3 and TOP_K == 4  # only 3 passages share a word with the query
    assert set(chunks[0]) == {"chunk", "chunk_id", "score"} and chunks[0]["chunk_id"] == 0
    assert chunks[0]["chunk"].startswith("Harrow Lighthouse: ") and chunks[0]["score"] >= chunks[-1]["score"] > 0
    assert empty.is_error and "the query is empty" in empty.content[0].text
    assert unknown.is_error and "no passage matches the query 'xyzzy'" in unknown.content[0].text


def test_agent_module_drops_the_sdks_export_to_openai(port_dir: Path) -> None:
    """Importing the agent removes the SDK's default processor (it posts traces to api.openai.com with a key set)."""
    import rag_agent  # noqa: F401 - the import is what is tested
    from agents.tracing import GLOBAL_TRACE_PROVIDER, default_processor

    assert default_processor() not in GLOBAL_TRACE_PROVIDER._multi_processor._processors


@pytest.mark.integration
def test_rag_agent_over_sse_tool_turns_token_ids_and_rewards(port_dir: Path, tmp_path: Path) -> None:
    from agl_stream_processors.clickhouse import connect
    from rag_agent import RAGAgent
    from train_rag import evaluation_details, retriever_server

    rows = [json.loads(line) for name in ("train", "val") for line in (DATA / f"{name}.jsonl").read_text().splitlines()]
    tasks = [next(r for r in rows if r["question"] == q) for q in SCRIPT]
    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    with ToolVllm(scripted_model) as engine, retriever_server(free_port(), tmp_path / "retriever.log") as url:
        trainer = Trainer(n_runners=1, settings=settings,
                          initial_resources={"main_llm": LLM(endpoint=engine.base_url, model="policy")})  # fmt: skip
        # the first and last questions as validation tasks: the agent's validation rollout, and the script's read-back
        report = trainer.fit(RAGAgent(mcp_server_url=url), tasks[1:2], val_dataset=[tasks[0], tasks[2]])
    assert report["train"]["succeeded"] == 1 and report["val"]["succeeded"] == 2, report
    assert len(engine.returned) == 6 and all(r.prompt_token_ids and r.response_token_ids for r in engine.returned)
    assert all(r.request["max_tokens"] == 4096 and r.request["temperature"] == 0.7 for r in engine.returned)

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        _, rollouts = ch.query_rows("SELECT RolloutId, JSONExtractString(Input, 'question') FROM rollouts FINAL")
        _, triplets = ch.query_rows(
            "SELECT RolloutId, TripletIndex, PromptTokenIds, ResponseTokenIds, FinalReward, Metadata FROM triplets FINAL "
            "WHERE Decision = 'final' ORDER BY RolloutId, TripletIndex")  # fmt: skip
        _, calls = ch.query_rows(
            "SELECT RolloutId, SpanAttributes FROM spans FINAL WHERE SpanName = 'openai.chat.completion' "
            "ORDER BY RolloutId, Timestamp")  # fmt: skip
        _, tools = ch.query_rows(
            "SELECT RolloutId, SpanName, SpanAttributes['input.value'], SpanAttributes['output.value'], StatusCode, "
            "SpanAttributes['mcp.tool.is_error'], SpanId, ParentSpanId FROM spans FINAL "
            "WHERE SpanAttributes['openinference.span.kind'] = 'TOOL' AND SpanName = 'retrieve.tool'")  # fmt: skip
        _, sdk_tools = ch.query_rows(
            "SELECT SpanId, SpanAttributes['openinference.span.kind'], SpanAttributes['agl.tool.recorded_by'] "
            "FROM spans FINAL WHERE SpanName = 'retrieve' AND SpanAttributes['tool.name'] = 'retrieve'")  # fmt: skip
        _, tool_spans = ch.query_rows(
            "SELECT SpanName FROM spans FINAL WHERE SpanAttributes['openinference.span.kind'] = 'TOOL'")
        _, agents = ch.query_rows(
            "SELECT DISTINCT RolloutId, SpanAttributes['agent.name'] FROM spans FINAL "
            "WHERE SpanAttributes['openinference.span.kind'] = 'AGENT'")  # fmt: skip
        _, requests = ch.query_rows("SELECT ParentSpanId FROM spans FINAL WHERE SpanName = 'MCP send tools/call retrieve'")
    finally:
        ch.close()

    question_of = dict(rollouts)
    assert sorted(question_of.values()) == sorted(SCRIPT)
    # token ids: each triplet is one request, with exactly the ids the server returned for it
    stored = [{"prompt_token_ids": list(t[2]), "response_token_ids": list(t[3])} for t in triplets]
    assert returned_pairs(stored) == returned_pairs(engine.returned)
    # the SDK's request span of each call nests under the MCP tool span, which nests under the Agents SDK's own
    # function-tool span ``retrieve``: a CHAIN span recorded by the MCP span, so each call is one TOOL span
    assert sorted(r[0] for r in requests) == sorted(t[6] for t in tools)
    assert sorted(t[7] for t in tools) == sorted(r[0] for r in sdk_tools) and len(tools) == 3
    assert sorted((r[1], r[2]) for r in sdk_tools) == sorted(("CHAIN", t[6]) for t in tools)
    assert sorted(r[0] for r in tool_spans) == ["retrieve.tool"] * 3

    for rid, question in question_of.items():
        query, title, final = SCRIPT[question]
        mine = [t for t in triplets if t[0] == rid]
        spans = [dict(attrs) for r, attrs in calls if r == rid]
        assert [t[1] for t in mine] == [0, 1] and len(spans) == 2, (question, mine, spans)
        # every LLM call is the Agents SDK agent's: its name is on the triplets (and on its AGENT span)
        assert [json.loads(t[5])["agent_name"] for t in mine] == ["Assistant", "Assistant"]
        assert (rid, "Assistant") in agents
        # turn 1: the tool call is the first triplet's response
        call = json.loads(spans[0]["gen_ai.completion.0.tool_calls"])[0]["function"]
        assert call["name"] == "retrieve" and json.loads(call["arguments"]) == {"query": query}
        assert list(mine[0][3]) == token_ids(reply_text(ToolCall("retrieve", {"query": query})))
        # the tool ran once, recorded by the MCP client's span: the query in, the chunks (or the error) out
        (tool,) = [t for t in tools if t[0] == rid]
        assert json.loads(tool[2]) == {"query": query}
        # turn 2: the tool's result, as the SDK handed it to the model, ends the second triplet's prompt
        last = max(int(k.split(".")[2]) for k in spans[1] if k.startswith("gen_ai.prompt.") and k.endswith(".role"))
        assert spans[1][f"gen_ai.prompt.{last}.role"] == "tool"
        turn = spans[1][f"gen_ai.prompt.{last}.content"]
        assert "\n".join(tool_blocks(turn)) == tool[3]
        assert list(mine[1][2])[-len(token_ids(turn)):] == token_ids(turn)
        assert list(mine[1][3]) == token_ids(final)
        if title is None:  # BM25 finds no word of the query: an isError result, which the model reads
            assert (tool[4], tool[5]) == ("Error", "true") and "no passage matches the query" in tool[3], tool
        else:
            chunks = [json.loads(text) for text in tool_blocks(turn)]
            assert (tool[4], tool[5]) == ("Unset", "false") and 1 <= len(chunks) <= 4, tool
            assert chunks[0]["chunk"].startswith(f"{title}: "), chunks
    # the reward: F1 of the tagged answer, on every triplet of the rollout
    reward_of: dict[str, set[float]] = {}
    for t in triplets:
        reward_of.setdefault(question_of[t[0]], set()).add(round(t[4], 3))
    assert [reward_of[q] for q in SCRIPT] == [{r} for r in REWARDS]

    # the training script's read-back of the validation rollouts (Baseline labels no evaluation: "")
    assert evaluation_details(settings) == {"": {"exact_match": 0.5, "tagged_answer": 0.5, "called_retrieve": 1.0,
                                                 "retrieve_calls": 1.0, "rollouts": 2}}  # fmt: skip
