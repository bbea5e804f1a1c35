"""A retrieval-augmented agent whose search tool is an MCP server (the spirit of upstream's rag example).

Upstream's ``examples/rag`` ran an OpenAI Agents SDK agent against an MCP Wikipedia retriever; that
SDK does not install beside this project's pins (it needs openai 3), so this agent is our own, with
the same parts: an LLM (the policy's OpenAI-compatible endpoint), an MCP server started for the
rollout (``retriever_mcp.py`` over stdio) and a ``ClientSession`` that calls its ``retrieve`` tool.

Turn 1: the model sees the question and may reply ``SEARCH <query>`` (``protocol.py``); the agent
calls ``retrieve(query, k)`` through the MCP session and sends the passages back as a turn; turn 2
is the model's answer. Nothing here mentions tracing: the runner traces both LLM calls (token ids
included, one triplet each) and the MCP tool call (a ``retrieve.tool`` span with the query, the
passages and an error status when the tool fails; :mod:`agl_stream.instrumentation.mcp`). The
reward is the answer's token F1 against the shipped ground truth; exact match (``correct``) is the
task success, and whether the model searched and found the right passage are reported beside it.

Run one question by hand::

    python -m examples.rag.agent --endpoint http://127.0.0.1:8000/v1 --model smollm2
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from openai import AsyncOpenAI

from agl_stream.emitter import emit_reward
from agl_stream.litagent import rollout
from agl_stream.types import LLM
from examples.rag.protocol import FEW_SHOT, SYSTEM_PROMPT, EpisodeScore, parse_search, score
from examples.rag.retriever_mcp import load_corpus

SERVER = StdioServerParameters(command=sys.executable, args=[str(Path(__file__).resolve().parent / "retriever_mcp.py")])
TITLES = {p.id: p.title for p in load_corpus()}
TOP_K = 1  # one passage keeps the prompt short; the question as query finds its passage first for all 80 questions


@dataclass
class Episode:
    first_reply: str
    final_reply: str
    query: Optional[str]
    results: Optional[str]  # the passages the tool returned (None without a search)
    tool_error: Optional[str]  # the tool's error text, when it returned isError


def tool_text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def solve(question: str, llm: LLM, *, max_tokens: int = 24, server: StdioServerParameters = SERVER) -> Episode:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=300)
    params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.7, **llm.sampling_parameters}
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, *FEW_SHOT,
                                      {"role": "user", "content": question}]  # fmt: skip
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        first = await client.chat.completions.create(model=llm.model, messages=messages, **params)  # type: ignore[arg-type]
        first_reply = first.choices[0].message.content or ""
        query = parse_search(first_reply)
        if query is None:
            return Episode(first_reply, first_reply, None, None, None)
        result = await session.call_tool("retrieve", {"query": query, "k": TOP_K})
    text = tool_text(result)
    turn = f"ERROR {text}" if result.is_error else f"RESULTS\n{text}"
    messages += [{"role": "assistant", "content": first_reply.strip()}, {"role": "user", "content": turn}]
    final = await client.chat.completions.create(model=llm.model, messages=messages, **params)  # type: ignore[arg-type]
    final_reply = final.choices[0].message.content or ""
    if result.is_error:
        return Episode(first_reply, final_reply, query, None, text)
    return Episode(first_reply, final_reply, query, text, None)


def score_episode(episode: Episode, task: dict[str, Any]) -> EpisodeScore:
    return score(episode.final_reply, str(task["answer"]), searched=episode.query is not None,
                 results=episode.results, title=TITLES.get(str(task.get("doc_id"))))  # fmt: skip


@rollout
async def rag_agent(task: dict[str, Any], llm: LLM) -> None:
    """One rollout: the final reward is the answer's F1, with exact match and the search's quality beside it."""
    episode = await solve(str(task["question"]), llm)
    emit_reward(score_episode(episode, task).as_rewards(), primary_key="f1")


if __name__ == "__main__":
    import argparse
    import asyncio

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--question", default="Who built Harrow Lighthouse?")
    parser.add_argument("--answer", default="Ada Quill")
    parser.add_argument("--doc-id", default="d01")
    args = parser.parse_args()
    ep = asyncio.run(solve(args.question, LLM(endpoint=args.endpoint, model=args.model)))
    print(ep, score_episode(ep, {"answer": args.answer, "doc_id": args.doc_id}))
