"""Framework agents for the golden corpus: record their LLM calls, and capture agl-stream's spans of them again.

Each :class:`FrameworkCase` is one rollout of a real framework agent (the agents of the framework stack tests and
examples) traced by agl-stream's own tracer: an :class:`~agl_stream.tracer.OtelTracer` with the instrumentations
a runner arms, the agent called as the runner calls it, its returned reward recorded by the runner's
``record_result``. Its LLM calls go to a :class:`~.replay_vllm.ReplayVllm`:

* ``record`` (``make golden``): the replay server forwards to the scripted engine of the framework tests
  (:class:`~tests.agl_stream.instrumentation.frameworks.servers.ToolVllm`) and keeps every exchange; the
  Anthropic cases talk to the Messages front of those tests (:class:`~.servers.MessagesFront`) in front of it,
  whose requests are kept too. ``record_frameworks.py`` replays exactly these calls through upstream.
* ``capture`` (the test): the replay server answers with the recorded exchanges and refuses any request that
  differs from the recorded one, so agl-stream's spans are of the very calls upstream's answer is about.

The servers run in a process of their own (the Messages front's litellm call must not land in the agent's
trace); each agent runs in a process of the venv its framework installs in (``python``: ``main`` is this venv,
``frameworks`` is ``.agl/frameworks-venv``, where AutoGen and CrewAI live), one process per venv.

CLI (run from the repository root with agl-stream's python)::

    python -m tests.agl_stream.adapter.golden.frameworks record --out exchanges.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from tests.agl_stream.adapter.golden.replay_vllm import ReplayVllm
from tests.agl_stream.instrumentation.frameworks.crewai_agents import CREWAI_OFFLINE

ROOT = Path(__file__).resolve().parents[4]
MODULE = "tests.agl_stream.adapter.golden.frameworks"
MODEL = "policy"  # the served model name every agent asks for
CALCULATOR = "tests.agl_stream.instrumentation.frameworks.servers:calculator"
#: litellm fetches these from GitHub when imported unless told to use its bundled copies
OFFLINE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True"}
#: the OpenAI Agents SDK exports its traces to OpenAI when a key is set; these cases run offline
DROPPED_ENV = ("OPENAI_API_KEY",)


@dataclass(frozen=True)
class FrameworkCase:
    """One framework rollout of the corpus (see the module doc); adding a framework is one more of these."""

    name: str  #: ``framework_<framework>[_<variant>]``
    framework: str  #: the framework's tag, also a shape of the case (``framework_litellm``)
    agent: str  #: ``module:object`` of an agl-stream rollout agent taking ``(task, llm)``
    task: dict[str, Any]
    description: str
    script: str = CALCULATOR  #: ``module:function`` deciding the scripted engine's replies while recording
    #: what the agent talks to: the engine's chat completions, or the Anthropic Messages front before it
    api: Literal["chat", "messages"] = "chat"
    #: how upstream's replay makes the calls: its openai client, its litellm (``provider``), the Anthropic SDK
    client: Literal["openai", "litellm", "anthropic"] = "openai"
    provider: Optional[str] = None
    python: Literal["main", "frameworks"] = "main"  #: the venv the agent runs in (see the module doc)
    shapes: tuple[str, ...] = field(default_factory=tuple)
    #: what the agent's process needs in its environment (a framework's offline opt-outs); the cases of one venv
    #: share a process, so they must not disagree on a variable
    env: dict[str, str] = field(default_factory=dict)


#: Adding a framework is one entry here: its agent (an agl-stream rollout taking ``(task, llm)`` whose LLM calls go
#: to ``llm.endpoint`` with ``llm.model``), a task the ``script`` answers, ``python="frameworks"`` when it installs
#: only in the side venv, ``env`` when its process needs some; then its ``framework`` goes into
#: ``spec.REQUIRED_FRAMEWORKS`` and ``make golden`` records it.
FRAMEWORK_TESTS = "tests.agl_stream.instrumentation.frameworks"
LITELLM = f"{FRAMEWORK_TESTS}.test_litellm:litellm_agent"
ANTHROPIC = f"{FRAMEWORK_TESTS}.test_anthropic:anthropic_agent"
FRAMEWORK_CASES: tuple[FrameworkCase, ...] = (
    FrameworkCase(
        "framework_openai_agents", "framework_openai_agents",
        "tests.agl_stream.instrumentation.frameworks.test_openai_agents:agents_sdk_agent", {"a": 6, "b": 7},
        "OpenAI Agents SDK: triage hands off to calculator, which calls multiply and states the product "
        "(three chat completions through the SDK's OpenAIChatCompletionsModel).",
        shapes=("multiple_llm_calls", "tool_calls", "nested_agents", "reward_final"),
    ),
    FrameworkCase(
        "framework_litellm_openai", "framework_litellm", LITELLM,
        {"provider": "openai", "async": False, "stream": False, "a": 6, "b": 7},
        "litellm.completion with openai/policy (litellm calls through the openai client): a multiply tool call, "
        "then the product.",
        client="litellm", provider="openai", shapes=("multiple_llm_calls", "tool_calls", "reward_final"),
    ),
    FrameworkCase(
        "framework_litellm_openai_stream", "framework_litellm", LITELLM,
        {"provider": "openai", "async": True, "stream": True, "a": 8, "b": 2},
        "litellm.acompletion with openai/policy, streamed: a multiply tool call, then the product.",
        client="litellm", provider="openai",
        shapes=("multiple_llm_calls", "tool_calls", "streaming_call", "reward_final"),
    ),
    FrameworkCase(
        "framework_litellm_hosted_vllm", "framework_litellm", LITELLM,
        {"provider": "hosted_vllm", "async": False, "stream": False, "a": 12, "b": 3},
        "litellm.completion with hosted_vllm/policy (litellm 1.106's own HTTP client; upstream's pinned litellm "
        "1.80 sends it through the openai client): a multiply tool call, then the product.",
        client="litellm", provider="hosted_vllm", shapes=("multiple_llm_calls", "tool_calls", "reward_final"),
    ),
    FrameworkCase(
        "framework_litellm_hosted_vllm_stream", "framework_litellm", LITELLM,
        {"provider": "hosted_vllm", "async": True, "stream": True, "a": 11, "b": 11},
        "litellm.acompletion with hosted_vllm/policy, streamed (litellm 1.106 drops vLLM's prompt ids from these "
        "streams): a multiply tool call, then the product.",
        client="litellm", provider="hosted_vllm",
        shapes=("multiple_llm_calls", "tool_calls", "streaming_call", "reward_final"),
    ),
    FrameworkCase(
        "framework_anthropic", "framework_anthropic", ANTHROPIC, {"api": "create", "stream": False, "a": 6, "b": 7},
        "Anthropic messages.create through the Messages front (token ids as the front's extra fields): a multiply "
        "tool_use the agent runs, then the product.",
        api="messages", client="anthropic", shapes=("multiple_llm_calls", "tool_calls", "reward_final"),
    ),
    FrameworkCase(
        "framework_anthropic_stream", "framework_anthropic", ANTHROPIC,
        {"api": "create", "stream": True, "a": 3, "b": 5},
        "Anthropic messages.create(stream=True) through the Messages front: a multiply tool_use, then the product.",
        api="messages", client="anthropic",
        shapes=("multiple_llm_calls", "tool_calls", "streaming_call", "reward_final"),
    ),
    FrameworkCase(
        "framework_langgraph", "framework_langgraph", "examples.langgraph_agent.agent:langgraph_agent",
        {"question": "What is 2 + 2?", "answer": "4"},
        "The LangGraph example (ChatOpenAI): a planner node's call, then a writer node's streamed call.",
        script=f"{MODULE}:langgraph_script", shapes=("multiple_llm_calls", "streaming_call", "reward_final"),
    ),
    FrameworkCase(
        "framework_autogen", "framework_autogen", f"{FRAMEWORK_TESTS}.autogen_agents:calc_team",
        {"a": 6, "b": 7, "stream": False, "mcp": "workbench"},
        "AutoGen AgentChat RoundRobinGroupChat (test_autogen's team): multiplier calls a multiply FunctionTool and "
        "states the product, then checker checks it with mcp-server-calculator's calculate over stdio (an "
        "McpWorkbench) and confirms it (four OpenAIChatCompletionClient calls).",
        script=f"{FRAMEWORK_TESTS}.test_autogen:calc_team_model", python="frameworks",
        shapes=("multiple_llm_calls", "tool_calls", "reward_final"),
    ),
    FrameworkCase(
        "framework_crewai", "framework_crewai", f"{FRAMEWORK_TESTS}.crewai_agents:crewai_agent",
        {"a": 6, "b": 7, "stream": False, "kickoff": "sync"},
        "CrewAI sequential crew (test_crewai's): calculator asks for the multiply tool and states its result, then "
        "writer reports it as structured output (output_pydantic: the openai client's parse); three calls through "
        "CrewAI's native OpenAI provider.",
        script=f"{FRAMEWORK_TESTS}.test_crewai:crew_model", python="frameworks", env=CREWAI_OFFLINE,
        shapes=("multiple_llm_calls", "tool_calls", "reward_final"),
    ),
)  # fmt: skip
CASES_BY_NAME = {case.name: case for case in FRAMEWORK_CASES}


def langgraph_script(body: dict[str, Any]) -> str:
    """The LangGraph example's model: a plan for the planner, the sum for the writer."""
    text = " ".join(str(m.get("content") or "") for m in body["messages"])
    if text.startswith("Plan"):
        return "add the two numbers"
    numbers = re.search(r"(\d+) \+ (\d+)", text)
    return f"the result is {int(numbers[1]) + int(numbers[2])}" if numbers else "I cannot tell"


def _load(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def frameworks_venv_python() -> Path:
    """The python of the side venv AutoGen and CrewAI install in (``make frameworks-venv``)."""
    return Path(os.environ.get("AGL_FRAMEWORKS_VENV", ROOT / ".agl" / "frameworks-venv")) / "bin" / "python"


def python_for(case: FrameworkCase) -> Path:
    return Path(sys.executable) if case.python == "main" else frameworks_venv_python()


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, **OFFLINE_ENV, "PYTHONPATH": path}


# ---------------------------------------------------------------------------------------------- servers


def _serve(plan: list[dict[str, Any]]) -> None:
    """The servers of every case in ``plan`` (this process's own), their URLs as one JSON line on stdout."""
    from tests.agl_stream.instrumentation.frameworks.servers import MessagesFront, ToolVllm

    urls: dict[str, dict[str, Optional[str]]] = {}
    for item in plan:  # every server lives as long as this process, which the parent terminates
        case = CASES_BY_NAME[item["case"]]
        target = None
        if item["exchanges"] is None:
            target = ToolVllm(_load(case.script)).__enter__()
        holder: dict[str, Any] = {}

        def front_requests(h: dict[str, Any] = holder) -> dict[str, Any]:
            return {"front_requests": list(h["front"].requests) if "front" in h else []}

        engine = ReplayVllm(item["exchanges"], forward_to=target.base_url if target is not None else None,
                            strict=item["exchanges"] is not None, extra_state=front_requests)  # fmt: skip
        engine.__enter__()
        front = None
        if case.api == "messages":
            front = holder["front"] = MessagesFront(engine.base_url).__enter__()
        urls[case.name] = {"engine": engine.base_url, "front": front.base_url if front is not None else None}
    print(json.dumps(urls), flush=True)
    threading.Event().wait()  # until terminated


class FrameworkServers:
    """The servers of ``cases`` in a child process: recording (``exchanges=None``) or replaying ``exchanges``."""

    def __init__(self, cases: list[FrameworkCase], exchanges: Optional[dict[str, list[dict[str, Any]]]], workdir: Path):
        self.plan = [{"case": c.name, "exchanges": None if exchanges is None else exchanges[c.name]} for c in cases]
        self.workdir = workdir
        self.urls: dict[str, dict[str, Optional[str]]] = {}
        self._process: Optional[subprocess.Popen[str]] = None

    def __enter__(self) -> "FrameworkServers":
        plan_path = self.workdir / "servers-plan.json"
        plan_path.write_text(json.dumps(self.plan))
        self._process = subprocess.Popen([sys.executable, "-m", MODULE, "serve", "--plan", str(plan_path)],
                                         stdout=subprocess.PIPE, text=True, env=subprocess_env(), cwd=ROOT)  # fmt: skip
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the framework servers exited with {self._process.wait()} before serving")
        self.urls = json.loads(line)
        return self

    def endpoint(self, case: FrameworkCase) -> str:
        """What the agent's LLM resource points at: the Messages front, else the engine."""
        urls = self.urls[case.name]
        return str(urls["front"] or urls["engine"])

    def state(self, case: FrameworkCase) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.urls[case.name]['engine']}/_state", timeout=30) as response:
            return dict(json.loads(response.read()))

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)


# ---------------------------------------------------------------------------------------------- agents


async def _capture(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run each case's agent in an attempt of agl-stream's tracer, as a runner does; its spans in sequence order."""
    from agl_stream.runner.results import record_result
    from agl_stream.tracer import OtelTracer, SpanExportPipeline
    from agl_stream.types import LLM, Attempt, AttemptedRollout
    from tests.agl_stream.tracer.fakes import ListSink

    sink = ListSink()
    tracer = OtelTracer(SpanExportPipeline(lambda: sink))  # type: ignore[arg-type]  # a test sink, same protocol
    tracer.init()
    captured: list[dict[str, Any]] = []
    try:
        for n, item in enumerate(plan):
            case = CASES_BY_NAME[item["case"]]
            agent = _load(case.agent)
            rollout_id, attempt_id = f"ro-golden{n:06d}", f"at-golden{n:03d}"
            rollout = AttemptedRollout(rollout_id=rollout_id, input=case.task, mode="train",
                                       attempt=Attempt(rollout_id=rollout_id, attempt_id=attempt_id))  # fmt: skip
            resources = {"llm": LLM(endpoint=item["endpoint"], model=MODEL)}
            async with tracer.trace_context(case.name, rollout_id=rollout_id, attempt_id=attempt_id) as state:
                if agent.is_async():
                    result = await agent.training_rollout_async(case.task, resources, rollout)
                else:  # as the runner does: in a thread that carries the active attempt
                    call = functools.partial(contextvars.copy_context().run, agent.training_rollout, case.task,
                                             resources, rollout)  # fmt: skip
                    result = await asyncio.get_running_loop().run_in_executor(None, call)
                record_result(result, tracer, state)
            await tracer.flush_attempt(state, timeout=60)
            spans = sorted((s for s in sink.spans if s.rollout_id == rollout_id), key=lambda s: s.sequence_id)
            captured.append({"case": case.name, "result": result, "spans": [s.model_dump(mode="json") for s in spans]})
    finally:
        tracer.teardown()
    return captured


def process_env(cases: list[FrameworkCase]) -> dict[str, str]:
    """The environment of one venv's agent process: every case's ``env`` over :func:`subprocess_env`."""
    env: dict[str, str] = {}
    for case in cases:
        clash = {k for k, v in case.env.items() if env.get(k, v) != v}
        if clash:
            raise ValueError(f"{case.name} sets {sorted(clash)} otherwise than another case of its venv")
        env.update(case.env)
    return {**subprocess_env(), **env}


def capture_in(python: Path, plan: list[dict[str, Any]], workdir: Path) -> list[dict[str, Any]]:
    """:func:`_capture` in a process of ``python`` (the case's venv); its output is in the error if it fails."""
    venv = python.parent.parent.name
    plan_path, out = workdir / f"capture-plan-{venv}.json", workdir / f"capture-{venv}.json"
    plan_path.write_text(json.dumps(plan))
    env = process_env([CASES_BY_NAME[item["case"]] for item in plan])
    done = subprocess.run([str(python), "-m", MODULE, "capture", "--plan", str(plan_path), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)  # fmt: skip
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"capturing {[p['case'] for p in plan]} with {python} failed (exit {done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-8000:]}")  # fmt: skip
    return list(json.loads(out.read_text()))


@dataclass
class CaseRun:
    """What one case's rollout left: agl-stream's spans, the reward the agent returned, what the servers saw."""

    case: FrameworkCase
    spans: list[dict[str, Any]]
    result: Any
    received: list[dict[str, Any]]
    recorded: list[dict[str, Any]]
    refused: list[dict[str, Any]]
    front_requests: list[dict[str, Any]]


def run_cases(
    cases: list[FrameworkCase], exchanges: Optional[dict[str, list[dict[str, Any]]]] = None
) -> dict[str, CaseRun]:
    """Record (``exchanges=None``) or replay every case: servers in one process, agents in one process per venv."""
    with tempfile.TemporaryDirectory(prefix="agl-golden-frameworks-") as tmp:
        workdir = Path(tmp)
        with FrameworkServers(cases, exchanges, workdir) as servers:
            captured: dict[str, dict[str, Any]] = {}
            for python in sorted({python_for(c) for c in cases}):
                plan = [{"case": c.name, "endpoint": servers.endpoint(c)} for c in cases if python_for(c) == python]
                captured.update({item["case"]: item for item in capture_in(python, plan, workdir)})
            states = {c.name: servers.state(c) for c in cases}
    return {c.name: CaseRun(c, captured[c.name]["spans"], captured[c.name]["result"], states[c.name]["received"],
                            states[c.name]["recorded"], states[c.name]["refused"], states[c.name]["front_requests"])
            for c in cases}  # fmt: skip


def record(out: Path) -> None:
    """Record every case's exchanges (the input of upstream's replay) into ``out``."""
    runs = run_cases(list(FRAMEWORK_CASES))
    recorded = []
    for case in FRAMEWORK_CASES:
        run = runs[case.name]
        if not run.recorded or len(run.recorded) != len(run.received):
            raise RuntimeError(f"{case.name}: {len(run.received)} requests reached the engine, "
                               f"{len(run.recorded)} were recorded")  # fmt: skip
        recorded.append({**asdict(case), "shapes": [case.framework, *case.shapes], "reward": run.result,
                         "exchanges": run.recorded, "messages_requests": run.front_requests})  # fmt: skip
        print(f"recorded {case.name}: {len(run.recorded)} LLM calls, reward {run.result}", file=sys.stderr)
    out.write_text(json.dumps(recorded, indent=1) + "\n")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("record", help="record every case's LLM calls").add_argument("--out", type=Path, required=True)
    serve = sub.add_parser("serve", help="(internal) the servers process")
    serve.add_argument("--plan", type=Path, required=True)
    capture = sub.add_parser("capture", help="(internal) run agents under agl-stream's tracer")
    capture.add_argument("--plan", type=Path, required=True)
    capture.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.out)
    elif args.command == "serve":
        _serve(json.loads(args.plan.read_text()))
    else:
        args.out.write_text(json.dumps(asyncio.run(_capture(json.loads(args.plan.read_text())))))


if __name__ == "__main__":  # the importable module's functions, not this __main__ copy's (one case registry)
    importlib.import_module(MODULE).main()
