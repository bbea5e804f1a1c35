"""The LangGraph example on the local stack: ``Trainer.fit`` starts the broker, the processors (with the
embedded ClickHouse) and a runner process; the agent's LLM is a scripted vLLM-style server.

Nothing in the agent mentions tracing: the OpenInference LangChain and OpenAI instrumentations the
runner activates record the graph, each node span carries ``agent.name``, the writer's *streamed*
call carries the token ids the server sent, and ``agent_match="writer"`` keeps only its calls.
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

pytestmark = [pytest.mark.integration, pytest.mark.slow]

pytest.importorskip("openinference.instrumentation.langchain")
pytest.importorskip("langgraph")

TASKS = [{"question": "What is 2 + 2?", "answer": "4"}, {"question": "What is 3 + 5?", "answer": "8"}]


def answer(body: dict[str, Any]) -> str:
    text = prompt_text(body)
    if text.startswith("Plan"):
        return "add the two numbers"
    return {"2 + 2": "the result is 4", "3 + 5": "the result is 8"}[next(k for k in ("2 + 2", "3 + 5") if k in text)]


def test_langgraph_agent_writer_triplets_with_token_ids(tmp_path: Path) -> None:
    from agl_stream_processors.clickhouse import connect

    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    with ScriptedVllm(answer) as server:
        trainer = Trainer(n_runners=1, adapter="tracer:agent_match=writer", settings=settings,
                          initial_resources={"llm": LLM(endpoint=server.base_url, model="policy")})  # fmt: skip
        report = trainer.fit("examples.langgraph_agent.agent:langgraph_agent", TASKS)
    assert report["train"]["succeeded"] == 2, report
    writer_requests = [r for r in server.requests if not prompt_text(r).startswith("Plan")]
    assert len(writer_requests) == 2 and all(r["stream"] and r["return_token_ids"] for r in writer_requests)

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        _, rows = ch.query_rows("SELECT PromptTokenIds, ResponseTokenIds, Reward, Metadata FROM triplets FINAL "
                                "WHERE Decision = 'final' ORDER BY Reward")  # fmt: skip
        agents = ch.query_rows("SELECT DISTINCT SpanAttributes['agent.name'] FROM spans FINAL "
                               "WHERE SpanAttributes['agent.name'] != '' ORDER BY 1")[1]  # fmt: skip
        llm_calls = ch.scalar("SELECT count() FROM spans FINAL WHERE SpanName = 'openai.chat.completion'")
    finally:
        ch.close()
    assert [a[0] for a in agents] == ["planner", "writer"]
    assert llm_calls == 4  # planner + writer per rollout, each recorded once
    assert len(rows) == 2  # one triplet per rollout: the writer's call only
    expected = {tuple(token_ids(prompt_text(r))): token_ids(answer(r)) for r in writer_requests}
    for prompt_ids, response_ids, reward, metadata in rows:
        assert list(response_ids) == expected[tuple(prompt_ids)]
        assert reward == 1.0 and json.loads(metadata)["agent_name"] == "writer"
