"""The controller's agent under a real runner and broker: a command per attempt, its input, reward and outcome."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from agl_stream.config import Settings
from agl_stream.emitter import find_final_reward
from agl_stream.runner import LitAgentRunner
from agl_stream.types import AttemptEvent, Span
from agl_stream_controller import CommandSpec
from agl_stream_controller.agent import PROCESS_SPAN_PREFIX, CommandAgent, RewardUnreadable, read_reward
from tests.agl_stream.runner.helpers import collect, run_with_timeout
from tests.agl_stream.runner.test_runner import _enqueue, _finished

AGENT = textwrap.dedent("""
    import json, os, sys
    task = json.load(open(os.environ["AGL_TASK_FILE"]))
    print(json.dumps({k: os.environ.get(k) for k in
                      ("OPENAI_BASE_URL", "AGL_OPENAI_BASE_URL", "AGL_EVENT_URL", "OPENAI_API_KEY", "QUESTION",
                       "AGL_ROLLOUT_MODE", "ANTHROPIC_BASE_URL")}))
    if task["input"].get("fail"):
        print("giving up", file=sys.stderr)
        sys.exit(3)
    with open(os.environ["AGL_REWARD_FILE"], "w") as out:
        json.dump({"value": 1.0 if task["input"]["answer"] == 4 else 0.0}, out)
""")


@pytest.mark.integration
async def test_each_attempt_runs_the_command_with_its_scoped_endpoint_input_and_reward(topics: Settings, tmp_path: Path) -> None:
    ids = await _enqueue(topics, [{"question": "2+2?", "answer": 4}, {"question": "?", "fail": True}], mode="train")
    spec = CommandSpec.model_validate({"argv": [sys.executable, "-c", AGENT],
                                       "input": {"env_map": {"QUESTION": "input.question"}}})  # fmt: skip
    agent = CommandAgent(spec, proxy_url="http://proxy.test:4000/", logs_dir=tmp_path / "logs")
    runner = LitAgentRunner(agent, topics, max_rollouts=2, heartbeat_interval=0.2)
    stats = await run_with_timeout(runner.run())
    assert (stats.rollouts_succeeded, stats.rollouts_failed) == (1, 1)  # type: ignore[attr-defined]

    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 2))
    good, bad = finished[ids[0]], finished[ids[1]]
    assert good.status == "succeeded" and good.metadata["final_reward"] == 1.0
    assert bad.status == "failed" and (bad.error or "").startswith("CommandFailed: exit code 3 (output: ")

    output = (tmp_path / "logs" / ids[0] / good.attempt_id / "output.log").read_text()
    seen = json.loads(output.splitlines()[0])
    scoped = f"http://proxy.test:4000/rollout/{ids[0]}/attempt/{good.attempt_id}/v1"
    assert seen == {
        "OPENAI_BASE_URL": scoped, "OPENAI_API_KEY": "agl-stream", "QUESTION": "2+2?", "AGL_ROLLOUT_MODE": "train",
        "AGL_OPENAI_BASE_URL": f"http://proxy.test:4000/proxy/rollout/{ids[0]}/attempt/{good.attempt_id}/mode/train/openai/v1",
        "AGL_EVENT_URL": f"http://proxy.test:4000/api/rollouts/{ids[0]}/attempt/{good.attempt_id}/events",
        "ANTHROPIC_BASE_URL": scoped.removesuffix("/v1"),  # the Anthropic SDK appends /v1/messages
    }  # fmt: skip
    assert "giving up" in (tmp_path / "logs" / ids[1] / bad.attempt_id / "output.log").read_text()

    spans = await collect(topics, "spans", Span, lambda s: len({x.rollout_id for x in s if x.name == "agentlightning.annotation"}) >= 2)
    processes = {s.rollout_id: s.attributes for s in spans if f"{PROCESS_SPAN_PREFIX}.returncode" in s.attributes}
    assert processes[ids[0]][f"{PROCESS_SPAN_PREFIX}.returncode"] == 0
    assert processes[ids[1]][f"{PROCESS_SPAN_PREFIX}.failure"] == "exit code 3"
    assert processes[ids[1]][f"{PROCESS_SPAN_PREFIX}.log_path"].endswith(f"{bad.attempt_id}/output.log")
    assert find_final_reward([s for s in spans if s.rollout_id == ids[0]]) == 1.0


def test_a_reward_file_holds_a_number_or_upstreams_event_data(tmp_path: Path) -> None:
    path = tmp_path / "reward"
    assert read_reward(path) is None
    path.write_text("0.5\n")
    assert read_reward(path) == 0.5
    path.write_text('{"value": 2}')
    assert read_reward(path) == 2.0
    path.write_text("great")
    with pytest.raises(RewardUnreadable, match="not a number or JSON"):
        read_reward(path)
    path.write_text('{"value": "high"}')
    with pytest.raises(RewardUnreadable, match="a reward is a number"):
        read_reward(path)


def test_with_a_key_secret_each_attempt_gets_its_own_key(tmp_path: Path) -> None:
    from agl_stream.service import AttemptKey, verify_attempt_key

    agent = CommandAgent(CommandSpec(argv=["agent"]), proxy_url="http://p", logs_dir=tmp_path, key="shared", key_secret="s")
    env = agent.environment("ro-1", "at-1", "val", tmp_path, {"input": {}})
    assert env["OPENAI_API_KEY"] == env["AGL_KEY"] == env["ANTHROPIC_API_KEY"] != "shared"
    assert verify_attempt_key("s", env["AGL_KEY"]) == AttemptKey("ro-1", "at-1")
    assert "/mode/val/" in env["AGL_OPENAI_BASE_URL"]


CHECK = textwrap.dedent("""
    import json, os, sys
    task = json.load(open(os.environ["AGL_TASK_FILE"]))
    said = open(os.environ["AGL_OUTPUT_FILE"]).read()
    if task["input"].get("broken_check"):
        sys.exit(4)
    print("checking", repr(said.strip()))
    print(1.0 if said.strip() == task["input"]["question"].upper() else 0.0)
""")


@pytest.mark.integration
async def test_a_third_party_cli_gets_the_task_as_arguments_and_a_check_script_sets_the_reward(
    topics: Settings, tmp_path: Path
) -> None:
    """What an unchanged command-line agent needs: the task in its arguments, and a check that grades its output."""
    tasks = [{"question": "say it; $(rm -rf /)", "right": True}, {"question": "say it", "broken_check": True}]
    ids = await _enqueue(topics, tasks, mode="train")
    # the "CLI": prints its first argument upper-cased, as a third-party tool prints its answer
    spec = CommandSpec.model_validate({
        "argv": [sys.executable, "-c", "import sys; print(sys.argv[1].upper())", "{input.question}"],
        "input": {"argv_template": True}, "check": [sys.executable, "-c", CHECK],
    })  # fmt: skip
    agent = CommandAgent(spec, proxy_url="http://proxy.test:4000", logs_dir=tmp_path / "logs")
    stats = await run_with_timeout(LitAgentRunner(agent, topics, max_rollouts=2, heartbeat_interval=0.2).run())
    assert (stats.rollouts_succeeded, stats.rollouts_failed) == (1, 1)  # type: ignore[attr-defined]
    finished = _finished(await collect(topics, "attempts", AttemptEvent, lambda ev: len(_finished(ev)) >= 2))
    good, bad = finished[ids[0]], finished[ids[1]]
    # the shell-looking question reached the program as one argument, untouched, and the check graded it right
    assert good.status == "succeeded" and good.metadata["final_reward"] == 1.0
    assert (tmp_path / "logs" / ids[0] / good.attempt_id / "output.log").read_text() == "SAY IT; $(RM -RF /)\n"
    assert bad.status == "failed" and (bad.error or "").startswith("CommandFailed: check failed: exit code 4")


def test_argument_templates_fill_task_fields_and_keep_literal_braces() -> None:
    from agl_stream_controller.spec import TaskFieldMissing, rendered_argv

    document = {"input": {"question": "What is 2 * 3?", "numbers": [4, 5], "meta": {"k": 1}}}
    assert rendered_argv(["llm", "{input.question}", "n={input.numbers.1}", "{input.meta}", "{{not}}", "{"], document) == [
        "llm", "What is 2 * 3?", "n=5", '{"k": 1}', "{not}", "{"]  # fmt: skip
    with pytest.raises(TaskFieldMissing, match="argument {input.missing}"):
        rendered_argv(["{input.missing}"], document)
