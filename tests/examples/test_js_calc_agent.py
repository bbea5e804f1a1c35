"""The JavaScript calculator agent (examples/js_calc_agent) run unchanged by the controller: a smoke run.

Node.js with the official ``openai`` npm package (installed by ``make js-agent`` from the committed
lockfile), the real proxy, the real broker and a real runner; the model is the fake backend's perfect
player of the calculator protocol, so both turns happen and the rewards are known. The learning run
on the CPU model is ``make js-demo``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from agl_stream.config import Settings
from agl_stream.runner import LitAgentRunner
from agl_stream.types import AttemptEvent, Span
from agl_stream_controller import CommandSpec
from agl_stream_controller.agent import CommandAgent
from tests.agl_stream.runner.helpers import collect, run_with_timeout
from tests.agl_stream.runner.test_runner import _enqueue, _finished
from tests.examples.program_proxy import calculator_proxy
from tests.ingest.fake_backend import detokenize
from tests.ingest.helpers import ServedApp

pytestmark = pytest.mark.integration

AGENT_DIR = Path(__file__).resolve().parents[2] / "examples" / "js_calc_agent"
NODE = shutil.which("node")


@pytest.fixture
def proxy(topics: Settings) -> Iterator[ServedApp]:
    if NODE is None:
        pytest.skip("node is not installed (Node.js 20+ runs the JavaScript agent)")
    if not (AGENT_DIR / "node_modules" / "openai").is_dir():
        pytest.skip("the agent's npm packages are not installed: run `make js-agent`")
    with calculator_proxy(topics, "calculator") as served:
        yield served


async def test_the_javascript_agent_runs_per_attempt_and_its_calls_become_spans(
    topics: Settings, proxy: ServedApp, tmp_path: Path
) -> None:
    tasks = [{"question": "What is 734 * 14?", "answer": "10276"}, {"question": "What is 303 * 94?", "answer": "1"}]
    ids = await _enqueue(topics, tasks, mode="train")
    spec = CommandSpec.model_validate({"argv": [NODE, str(AGENT_DIR / "agent.mjs")], "env": {"AGENT_MODEL": "calculator"},
                                       "limits": {"timeout_seconds": 120}})  # fmt: skip
    agent = CommandAgent(spec, proxy_url=proxy.url, logs_dir=tmp_path / "logs")
    stats = await run_with_timeout(LitAgentRunner(agent, topics, max_rollouts=2, heartbeat_interval=0.2).run())
    assert (stats.rollouts_succeeded, stats.rollouts_failed) == (2, 0)  # type: ignore[attr-defined]

    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 2))
    assert [finished[r].metadata.get("final_reward") for r in ids] == [1.0, 0.0]  # the second task's answer is wrong
    spans = await collect(topics, "spans", Span, lambda s: sum(x.name == "openai.chat.completion" for x in s) >= 4)
    for rollout_id, task in zip(ids, tasks):
        calls = sorted((s for s in spans if s.rollout_id == rollout_id and s.name == "openai.chat.completion"),
                       key=lambda s: s.sequence_id)  # fmt: skip
        assert len(calls) == 2  # CALC, then the answer after RESULT
        first, second = (detokenize(c.attributes["response_token_ids"]) for c in calls)
        assert first == "CALC " + task["question"].removeprefix("What is ").rstrip("?")
        assert second == str(eval(first.removeprefix("CALC ")))  # noqa: S307 (the test's own literal)
        assert detokenize(calls[1].attributes["prompt_token_ids"]).startswith(
            detokenize(calls[0].attributes["prompt_token_ids"]))  # fmt: skip (multi-turn: the prefix grows)
