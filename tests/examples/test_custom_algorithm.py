"""Upstream's custom-algorithm loop, written against the store API by name, on the real pipeline.

``examples.custom_algorithm.algorithm.prompt_search`` enqueues, waits, reads every rollout's spans
with ``query_spans`` and adapts them; the agent streams its LLM call (traced by OpenInference) from a
scripted vLLM-style server. The triplets the algorithm builds from the spans must be exactly the
ones the triplet processor put on ``agl.triplets`` for the same rollouts, token ids included.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agl_stream.config import Settings
from agl_stream.runner import LitAgentRunner
from agl_stream.types import LLM, Trajectory
from examples.custom_algorithm.agent import qa_agent
from examples.custom_algorithm.algorithm import prompt_search
from examples.custom_algorithm.run import PROMPTS
from tests.agl_stream.client.pipeline import store_with_pipeline
from tests.agl_stream.runner.helpers import collect
from tests.agl_stream.scripted_vllm import ScriptedVllm, token_ids

pytestmark = pytest.mark.integration

pytest.importorskip("openinference.instrumentation.openai")

DATA = [json.loads(line) for line in (Path(__file__).parents[2] / "examples/custom_algorithm/data.jsonl").read_text().splitlines()]


def answer(body: dict[str, Any]) -> str:
    """Right only when the prompt asks for the number alone (so the prompts score differently)."""
    prompt = body["messages"][-1]["content"]
    task = next(t for t in DATA if t["question"] in prompt)
    return task["answer"] if "number only" in prompt else "let me think about it"


async def test_custom_algorithm_gets_the_triplet_processors_triplets(topics: Settings) -> None:
    with ScriptedVllm(answer) as server:
        async with store_with_pipeline(topics) as store:
            runner = LitAgentRunner(qa_agent, topics, concurrency=4, heartbeat_interval=1.0)
            stop = asyncio.Event()
            running = asyncio.create_task(runner.run(stop))
            try:
                result = await prompt_search(store=store, llm=LLM(endpoint=server.base_url, model="policy"),
                                             prompts=PROMPTS, dataset=DATA)  # fmt: skip
            finally:
                stop.set()
                await asyncio.wait_for(running, 60)
            latest = await store.get_latest_resources()
        n = len(PROMPTS) * len(DATA)
        trajectories = await collect(topics, "triplets", Trajectory, lambda ts: len(ts) >= n)

    assert result.best_prompt == PROMPTS[1] and result.scores == {PROMPTS[0]: 0.0, PROMPTS[1]: 1.0, PROMPTS[2]: 0.0}
    assert latest is not None and latest.resources["prompt_template"].template == PROMPTS[1]  # type: ignore[union-attr]
    assert all(r["stream"] is True and r["return_token_ids"] is True for r in server.requests)
    by_rollout = {t.rollout_id: t for t in trajectories}
    assert set(by_rollout) == set(result.triplets) and len(by_rollout) == n
    for rollout_id, ours in result.triplets.items():
        theirs = by_rollout[rollout_id]
        assert theirs.decision == "final"
        assert [t.model_dump() for t in ours] == [t.model_dump() for t in theirs.triplets]
        (triplet,) = ours  # one streamed LLM call per rollout, with the token ids the server sent
        assert triplet.response_token_ids == token_ids(_reply_of(server, triplet.prompt_token_ids))
        assert triplet.prompt_token_ids and triplet.reward in (0.0, 1.0)


def _reply_of(server: ScriptedVllm, prompt_ids: list[int]) -> str:
    for body in server.requests:
        if token_ids(body["messages"][-1]["content"]) == prompt_ids:
            return answer(body)
    raise AssertionError(f"no request had prompt token ids {prompt_ids}")
