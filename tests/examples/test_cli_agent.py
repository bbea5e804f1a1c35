"""A third-party CLI agent (Simon Willison's ``llm`` from PyPI) run unchanged by the controller: a smoke run.

``make cli-agent`` installs it in its own venv. The controller fills the question into its arguments, the
real proxy records its streamed call with token ids, and ``examples/cli_agent/check.py`` grades what it
printed; the model is the fake backend's calculator player (it answers "CALC <expression>"). The learning run
on the CPU model is ``make cli-demo``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from agl_stream.config import Settings
from agl_stream.runner import LitAgentRunner
from agl_stream.types import AttemptEvent, Span
from agl_stream_controller import CommandSpec
from agl_stream_controller.agent import CommandAgent
from examples.controller_demo import CLI_SYSTEM_PROMPT, LLM_CLI, LLM_HOME, ROOT
from tests.agl_stream.runner.helpers import collect, run_with_timeout
from tests.agl_stream.runner.test_runner import _enqueue, _finished
from tests.examples.program_proxy import calculator_proxy
from tests.ingest.fake_backend import detokenize, render_chat
from tests.ingest.helpers import ServedApp

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(topics: Settings) -> Iterator[ServedApp]:
    if not LLM_CLI.exists() or not (LLM_HOME / "logs.db").exists():
        pytest.skip("the llm CLI is not installed: run `make cli-agent`")
    # llm asks for gpt-4o-mini; the proxy serves that name from the backend
    with calculator_proxy(topics, "gpt-4o-mini") as served:
        yield served


async def test_the_llm_cli_runs_per_attempt_its_streamed_call_becomes_a_span_and_the_check_grades_it(
    topics: Settings, proxy: ServedApp, tmp_path: Path
) -> None:
    # the fake player answers "CALC 8 + 19"; the check takes its last integer, 19
    tasks = [{"question": "What is 8 + 19?", "answer": "19"}, {"question": "What is 30 - 12?", "answer": "18"}]
    ids = await _enqueue(topics, tasks, mode="train")
    spec = CommandSpec.model_validate({
        "argv": [str(LLM_CLI), "--no-log", "-m", "gpt-4o-mini", "-s", CLI_SYSTEM_PROMPT, "{input.question}"],
        "input": {"argv_template": True}, "env": {"LLM_USER_PATH": str(LLM_HOME)}, "limits": {"timeout_seconds": 120},
        "check": [sys.executable, str(ROOT / "examples" / "cli_agent" / "check.py")],
    })  # fmt: skip
    agent = CommandAgent(spec, proxy_url=proxy.url, logs_dir=tmp_path / "logs")
    stats = await run_with_timeout(LitAgentRunner(agent, topics, max_rollouts=2, heartbeat_interval=0.2).run())
    assert (stats.rollouts_succeeded, stats.rollouts_failed) == (2, 0)  # type: ignore[attr-defined]

    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 2))
    assert [finished[r].metadata.get("final_reward") for r in ids] == [1.0, 0.0]
    spans = await collect(topics, "spans", Span, lambda s: sum(x.name == "openai.chat.completion" for x in s) >= 2)
    for rollout_id, task in zip(ids, tasks):
        [call] = [s for s in spans if s.rollout_id == rollout_id and s.name == "openai.chat.completion"]
        a = call.attributes
        assert a["gen_ai.request.streaming"] is True  # llm streams by default
        assert detokenize(a["prompt_token_ids"]) == render_chat([{"role": "system", "content": CLI_SYSTEM_PROMPT},
                                                                 {"role": "user", "content": task["question"]}])  # fmt: skip
        assert detokenize(a["response_token_ids"]) == "CALC " + task["question"].removeprefix("What is ").rstrip("?")
