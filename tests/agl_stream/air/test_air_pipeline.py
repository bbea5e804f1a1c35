"""AIR on the local stack: a tool-using agent's intermediate rewards reach the right triplets in ClickHouse.

The processors service runs in this process (state machine, triplet processor, ClickHouse sinks on the
embedded engine) against the real broker; real runners execute the agents; the model is a scripted
vLLM-style server that asks for tools in text (``CALL <tool> <args>``). The first agent makes three
LLM calls: the first asks for ``add`` (succeeds), the second for ``divide`` by zero (fails on purpose),
the third answers; the agent returns the final reward. Expected in the ``triplets`` table: the success
rule's reward on the first call's triplet, the failure rule's on the second's, the final reward on the
last. The second agent's rule raises: its rollout still succeeds, the tool's result is what the agent
got, and the ``dead_letters`` table has a letter whose reason names the rule.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, Iterator

import pytest

from agl_stream import air
from agl_stream.client import StoreClient
from agl_stream.client.clickhouse_reader import ClickHouseReader
from agl_stream.config import Settings
from agl_stream.litagent import LitAgent, rollout
from agl_stream.runner import LitAgentRunner
from agl_stream.types import LLM
from tests.agl_stream.client.pipeline import processors
from tests.agl_stream.scripted_vllm import ScriptedVllm, token_ids

pytestmark = pytest.mark.integration

pytest.importorskip("openinference.instrumentation.openai")

FINAL_REWARD = 1.0
SUCCESS_REWARD = 0.5
FAILURE_REWARD = -0.25
REPLIES = {
    "plan": "CALL add 2 3", "after-add": "CALL divide 5 0", "after-divide": "ANSWER 5",
    "lookup": "CALL lookup paris", "after-lookup": "ANSWER france",
}  # fmt: skip


def answer(body: dict[str, Any]) -> str:
    """The scripted model: what it says depends on the last turn only."""
    last = str(body["messages"][-1]["content"])
    if last.startswith("RESULT 5"):
        return REPLIES["after-add"]
    if last.startswith("ERROR"):
        return REPLIES["after-divide"]
    if last.startswith("RESULT france"):
        return REPLIES["after-lookup"]
    return REPLIES["lookup"] if "capital" in last else REPLIES["plan"]


@air.tool
def add(a: float, b: float) -> float:
    return a + b


@air.tool
def divide(a: float, b: float) -> float:
    return a / b


@air.tool
def lookup(city: str) -> str:
    return {"paris": "france"}[city]


TOOLS: dict[str, Callable[..., Any]] = {"add": add, "divide": divide, "lookup": lookup}


def run_tools(task: dict[str, Any], llm: LLM) -> float:
    """A text-protocol tool loop: the model asks for a tool, gets its result (or error), answers."""
    from openai import OpenAI

    client = OpenAI(base_url=llm.endpoint, api_key="unused", max_retries=1, timeout=60)
    messages: list[dict[str, str]] = [{"role": "user", "content": task["question"]}]
    for _ in range(4):
        reply = client.chat.completions.create(model=llm.model, messages=messages, max_tokens=16)  # type: ignore
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        if text.startswith("ANSWER"):
            return FINAL_REWARD if text.split()[1] == task["answer"] else 0.0
        _, name, *args = text.split()
        try:
            result = TOOLS[name](*(float(a) for a in args)) if name != "lookup" else TOOLS[name](*args)
            shown = f"{result:g}" if isinstance(result, float) else str(result)
            messages.append({"role": "user", "content": f"RESULT {shown}"})
        except Exception as exc:
            messages.append({"role": "user", "content": f"ERROR {type(exc).__name__}"})
    return 0.0


@rollout
def calculator_agent(task: dict[str, Any], llm: LLM) -> float:
    return run_tools(task, llm)


@rollout
def lookup_agent(task: dict[str, Any], llm: LLM) -> float:
    return run_tools(task, llm)


@pytest.fixture(autouse=True)
def rules() -> Iterator[None]:
    air.clear_rules()
    air.on_tool_success(lambda call: SUCCESS_REWARD, tool="add", name="add-worked")
    air.on_tool_failure(lambda call: FAILURE_REWARD, tool="divide", name="divide-failed")

    @air.on_tool_success(tool="lookup", name="broken-rule")
    def broken(call: air.ToolCall) -> float:
        raise ValueError(f"cannot score {call.result!r}")

    yield
    air.clear_rules()


async def run_one(settings: Settings, agent: LitAgent[Any], server: ScriptedVllm, task: dict[str, Any]) -> str:
    """Enqueue one task and run it with a fresh runner; returns the rollout id."""
    async with StoreClient(settings) as store:
        await store.add_resources({"llm": LLM(endpoint=server.base_url, model="policy")})
        rollout_id = (await store.enqueue_rollout(task, mode="train")).rollout_id
    runner = LitAgentRunner(agent, settings, max_rollouts=1, heartbeat_interval=1.0)
    stats = await asyncio.wait_for(runner.run(), 120)
    assert stats.rollouts_succeeded == 1 and stats.rollouts_failed == 0
    return rollout_id


async def wait_rows(reader: ClickHouseReader, sql: str, count: int, timeout: float = 90.0) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + timeout
    while True:
        rows = (await reader.query(sql))[1]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.5)


async def test_rewards_land_on_the_requesting_calls_and_a_raising_rule_is_dead_lettered(topics: Settings) -> None:
    started = time.monotonic()
    with ScriptedVllm(answer) as server:
        async with processors(topics):
            calc_task = {"question": "what is 2 + 3, then 5 / 0", "answer": "5"}
            calc = await run_one(topics, calculator_agent, server, calc_task)
            look = await run_one(topics, lookup_agent, server, {"question": "capital of paris?", "answer": "france"})
            reader = ClickHouseReader(topics.effective_clickhouse_dsn)
            try:
                triplets = await wait_rows(reader, (
                    "SELECT RolloutId, TripletIndex, ResponseTokenIds, Reward, FinalReward, Metadata, Decision, Status "
                    "FROM triplets FINAL ORDER BY RolloutId, TripletIndex"), 5)
                letters = await wait_rows(reader, (
                    "SELECT Reason, ErrorType, Processor, SourceTopic, Key, Payload FROM dead_letters FINAL "
                    f"WHERE Key = '{look}'"), 1)
                tool_spans = await wait_rows(reader, (
                    "SELECT SpanName, StatusCode, SpanAttributes['tool.name'] FROM spans FINAL "
                    f"WHERE RolloutId = '{calc}' AND SpanAttributes['openinference.span.kind'] = 'TOOL' "
                    "ORDER BY Timestamp"), 2)
                rollouts = await wait_rows(reader, (
                    f"SELECT RolloutId, Status FROM rollouts FINAL WHERE RolloutId IN ('{calc}', '{look}') "
                    "AND Status = 'succeeded' ORDER BY RolloutId"), 2)
            finally:
                await reader.close()
    assert len(server.requests) == 5

    by_rollout: dict[str, list[tuple[Any, ...]]] = {}
    for row in triplets:
        by_rollout.setdefault(row[0], []).append(row)
    # the calculator agent: one triplet per LLM call, in call order, each with the reward its tool earned
    calc_rows = by_rollout[calc]
    assert [list(r[2]) for r in calc_rows] == [token_ids(REPLIES[k]) for k in ("plan", "after-add", "after-divide")]
    assert [r[3] for r in calc_rows] == [SUCCESS_REWARD, FAILURE_REWARD, FINAL_REWARD]
    assert {r[4] for r in calc_rows} == {FINAL_REWARD}  # the returned reward stays the final reward
    parts = [json.loads(r[5]).get("intermediate_rewards") for r in calc_rows]
    assert parts == [[SUCCESS_REWARD], [FAILURE_REWARD], None]
    assert {(r[6], r[7]) for r in calc_rows} == {("final", "succeeded")}
    assert [(name, tool) for name, _, tool in tool_spans] == [("add.tool", "add"), ("divide.tool", "divide")]
    assert "ERROR" not in tool_spans[0][1].upper() and "ERROR" in tool_spans[1][1].upper()

    # the lookup agent: its rule raised, the agent got the tool's result and answered right; no reward from the rule
    look_rows = by_rollout[look]
    assert [list(r[2]) for r in look_rows] == [token_ids(REPLIES["lookup"]), token_ids(REPLIES["after-lookup"])]
    assert [r[3] for r in look_rows] == [None, FINAL_REWARD] and {r[4] for r in look_rows} == {FINAL_REWARD}
    assert [r[0] for r in rollouts] == sorted([calc, look])
    (reason, error_type, processor, source_topic, key, payload) = letters[0]
    assert len(letters) == 1 and "AIR rule 'broken-rule' raised ValueError: cannot score 'france'" in reason
    assert error_type == "ValueError" and processor.startswith("air:") and source_topic == topics.topic("spans")
    body = json.loads(payload)
    assert body["tool"] == "lookup" and body["rollout_id"] == look and json.loads(body["args"]) == {"city": "paris"}
    assert time.monotonic() - started < 240
