"""Agent Lightning's Calc-X agent, ported (examples/ported/calc_x): AutoGen + an MCP calculator on the local stack.

The integration test runs the agent as ``train_calc_agent.py`` names it (``AGENT``, a file path the
runners import) through ``agl.Trainer(n_runners=1, runner_python=<frameworks side venv>).fit`` with the
default ``Baseline``: the broker, processors and embedded ClickHouse run from this venv, the runner
process from the side venv, where each rollout starts ``python -m mcp_server_calculator`` through
AutoGen's ``McpWorkbench``. The model is a scripted vLLM-style server (``ToolVllm``) that asks for the
``calculate`` tool and then answers from its result, so each rollout is two LLM calls: the tool call,
and the answer whose prompt ends with the tool's result. The substitution is that server instead of
the embedded engine (its tool calling is separate work) and ``Baseline`` instead of ``agl.RL``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agl_stream import Settings, Trainer
from agl_stream.types import LLM
from examples.ported.calc_x import make_data
from examples.ported.calc_x.eval_utils import evaluate, float_eval, scalar_are_results_same
from examples.ported.calc_x.train_calc_agent import AGENT, HERE, load_jsonl
from tests.agl_stream.instrumentation.frameworks.pipeline import returned_pairs
from tests.agl_stream.instrumentation.frameworks.servers import Reply, ToolCall, ToolVllm, reply_text
from tests.agl_stream.scripted_vllm import token_ids
from tests.frameworks_venv import frameworks_python

TASK_IDS = ("test__00000", "test__00001", "test__00002")


def test_shipped_data_is_what_make_data_writes(tmp_path: Path) -> None:
    make_data.main(["--out", str(tmp_path)])
    for name, n in (("train", 200), ("test", 64)):
        shipped = (HERE / "data" / f"{name}.jsonl").read_text()
        assert (tmp_path / f"{name}.jsonl").read_text() == shipped
        rows = [json.loads(line) for line in shipped.splitlines()]
        assert len(rows) == n and all(set(r) == {"id", "question", "chain", "result", "source"} for r in rows)
        assert all(r["chain"].endswith(f"<result>{r['result']}</result>") for r in rows)
    train, test = (load_jsonl(str(HERE / "data" / f"{name}.jsonl")) for name in ("train", "test"))
    assert not {r["question"] for r in train} & {r["question"] for r in test}


def test_evaluate_is_exact_numeric_match() -> None:
    right = ["24", " 24.0 ", "48/2", "(1/4) * 96", "24.", "$24"]
    assert [asyncio.run(evaluate(answer, "24")) for answer in right] == [1.0] * len(right)
    wrong = ["23.9", "24 pages", "", None, "twenty-four", "1/0"]
    assert [asyncio.run(evaluate(answer, "24")) for answer in wrong] == [0.0] * len(wrong)
    assert float_eval("2/3 = around 0.666667") == float_eval("4/6") and float_eval("1,200") == 1200
    assert scalar_are_results_same("(C)", "C", 0.0) and not scalar_are_results_same("B", "C", 0.0)
    assert scalar_are_results_same("0.667", "2/3", 1e-2)  # upstream's tolerance, when asked for


def scripted_model(tasks: dict[str, dict[str, Any]]) -> Any:
    """First call: ``calculate`` on the chain's last step (a wrong expression for the third task); second call:
    the answer from the tool's result (off by one for the second task, no answer when the tool failed)."""
    expressions = {q: t["chain"].split('<gadget id="calculator">')[-1].split("</gadget>")[0] for q, t in tasks.items()}
    first, second, third = tasks

    def reply(body: dict[str, Any]) -> Reply:
        question = next(q for q in tasks if any(q in str(m.get("content")) for m in body["messages"]))
        last = body["messages"][-1]
        if last.get("role") != "tool":
            return ToolCall("calculate", {"expression": "bananas * 3" if question == third else expressions[question]})
        value = str(last["content"]).strip()
        if question == first:
            return f"The calculator says {value}. ### ANSWER: {value} ###"
        if question == second:
            return f"### ANSWER: {float(value) + 1:g} ###"
        return "The calculator could not do it."

    return reply


@pytest.mark.integration
def test_calc_x_agent_in_side_venv_tool_turns_and_rewards(tmp_path: Path) -> None:
    from agl_stream_processors.clickhouse import connect

    python = frameworks_python("autogen_agentchat", "autogen_ext", "mcp_server_calculator")
    rows = {r["id"]: r for r in load_jsonl(str(HERE / "data" / "test.jsonl"))}
    tasks = [rows[i] for i in TASK_IDS]
    by_question = {t["question"]: t for t in tasks}
    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    with ToolVllm(scripted_model(by_question)) as engine:
        trainer = Trainer(n_runners=1, settings=settings, runner_python=python,
                          initial_resources={"llm": LLM(endpoint=engine.base_url, model="policy")})  # fmt: skip
        report = trainer.fit(AGENT, tasks)
    assert report["train"]["succeeded"] == 3, report
    assert len(engine.returned) == 6 and all(r.prompt_token_ids and r.response_token_ids for r in engine.returned)

    ch = connect(settings.effective_clickhouse_dsn)
    try:
        _, rollouts = ch.query_rows("SELECT RolloutId, JSONExtractString(Input, 'id') FROM rollouts FINAL")
        _, triplets = ch.query_rows(
            "SELECT RolloutId, TripletIndex, PromptTokenIds, ResponseTokenIds, FinalReward FROM triplets FINAL "
            "WHERE Decision = 'final' ORDER BY RolloutId, TripletIndex")  # fmt: skip
        _, calls = ch.query_rows(
            "SELECT RolloutId, SpanAttributes FROM spans FINAL WHERE SpanName = 'openai.chat.completion' "
            "ORDER BY RolloutId, Timestamp")  # fmt: skip
        _, tools = ch.query_rows(
            "SELECT RolloutId, SpanName, SpanAttributes['openinference.span.kind'], SpanAttributes['input.value'], "
            "SpanAttributes['output.value'], StatusCode, SpanAttributes['mcp.tool.is_error'], "
            "SpanAttributes['agl.tool.recorded_by'], SpanId FROM spans FINAL "
            "WHERE SpanAttributes['tool.name'] = 'calculate' ORDER BY RolloutId, Timestamp")  # fmt: skip
    finally:
        ch.close()

    task_of = {rid: rows[task_id] for rid, task_id in rollouts}
    assert sorted(t["id"] for t in task_of.values()) == list(TASK_IDS)
    # token ids: each triplet is one request, with exactly the ids the server returned for it
    stored = [{"prompt_token_ids": list(p), "response_token_ids": list(r)} for _, _, p, r, _ in triplets]
    assert returned_pairs(stored) == returned_pairs(engine.returned)

    right, off_by_one, failed = (next(rid for rid, t in task_of.items() if t["id"] == i) for i in TASK_IDS)
    for rid, task in task_of.items():
        mine = [t for t in triplets if t[0] == rid]
        spans = [dict(attrs) for r, attrs in calls if r == rid]
        assert [t[1] for t in mine] == [0, 1] and len(spans) == 2, (task["id"], mine, spans)
        # turn 1: the assistant's tool call is the first triplet's response
        call = json.loads(spans[0]["gen_ai.completion.0.tool_calls"])[0]["function"]
        expression = json.loads(call["arguments"])["expression"]
        assert call["name"] == "calculate"
        assert list(mine[0][3]) == token_ids(reply_text(ToolCall("calculate", {"expression": expression})))
        # the tool ran once and is recorded once: the MCP client's ``calculate.tool`` TOOL span
        # (instrumentation/mcp.py); AutoGen's own span around it is a CHAIN that points at it
        (mcp,) = [t for t in tools if t[0] == rid and t[2] == "TOOL"]
        (autogen,) = [t for t in tools if t[0] == rid and t[2] != "TOOL"]
        assert mcp[1] == "calculate.tool" and autogen[2] == "CHAIN" and autogen[7] == mcp[8], (mcp, autogen)
        assert json.loads(autogen[3]) == json.loads(mcp[3]) == {"expression": expression} and autogen[4] == mcp[4]
        # turn 2: the tool's result ends the second triplet's prompt
        roles = [k for k in spans[1] if k.startswith("gen_ai.prompt.") and k.endswith(".role")]
        last_prompt = max(int(k.split(".")[2]) for k in roles)
        assert spans[1][f"gen_ai.prompt.{last_prompt}.role"] == "tool"
        tool_turn = spans[1][f"gen_ai.prompt.{last_prompt}.content"]
        assert tool_turn == mcp[4] and list(mine[1][2])[-len(token_ids(tool_turn)):] == token_ids(tool_turn)
        if rid == failed:  # the calculator's error reaches the model as the tool turn, and marks the MCP span
            assert (mcp[5], mcp[6]) == ("Error", "true") and "Unknown identifier: bananas" in tool_turn, mcp
        else:
            assert (mcp[5], mcp[6]) == ("Unset", "false") and float(tool_turn) == float(task["result"]), mcp
    # the reward: 1 for the exact result only
    assert {t[0]: t[4] for t in triplets} == {right: 1.0, off_by_one: 0.0, failed: 0.0}
