"""``make js-demo`` / ``make cli-demo``: the demo's job with an agent that is a program, run unchanged per attempt.

The same model, learner and held-out evaluation as ``make demo`` (``examples/demo.py``), but the agent is not
Python code of ours: the runner processes run a program once per attempt through the rollout controller's
agent (``agl_stream_controller.CommandAgent``), and its model calls go to the LLM proxy started here in front of
the learner's embedded engine, which records each call with its token ids, so the learner trains on them.

- ``js``: ``examples/js_calc_agent/agent.mjs``, a Node.js program with the official ``openai`` package, on the
  demo's calculator task (``examples/calc_agent/data``);
- ``llm``: Simon Willison's ``llm`` CLI from PyPI (``examples/cli_agent``), its answer graded by
  ``examples/cli_agent/check.py``, on the arithmetic task (``examples/arithmetic/data``);
- ``gsm8k``: upstream v1.0's own GSM8K agent (``examples/gsm8k/gsm8k_agent.py``, class ``ChatAgent``), from a
  checkout of microsoft/agent-lightning at v1.0.0 kept outside this repository (``AGL_UPSTREAM_REPO``), run as
  upstream's local controller runs ``local.agent_class`` (``agl_stream_controller.python_agent``) with upstream's
  ``env_map`` (QUESTION, ANSWER), on the arithmetic task; it posts its reward to ``AGL_EVENT_URL`` itself.

``python -m examples.controller_demo js|llm|gsm8k``. Environment knobs as the demo's (``AGL_DEMO_STEPS``,
``AGL_DEMO_TRAIN_SECONDS``, ``AGL_DEMO_SEED``, ``AGL_DEMO_MODEL``, ``AGL_DEMO_VAL``, ``AGL_DEMO_EVAL_SAMPLES``);
the data folder is ``.agl/<name>-demo`` (``AGL_DATA_DIR``), the plot ``reports/<name>-demo-seed<N>.png``.
"""

from __future__ import annotations

import asyncio
from hashlib import sha256
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import httpx

from agl_stream import Settings
from agl_stream.broker import free_port, local_broker
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceProcess
from agl_stream.trainer import Trainer
from agl_stream_controller import CommandSpec
from agl_stream_controller.agent import CommandAgent
from examples.demo import console, demo_knobs, present, trainer_config

ROOT = Path(__file__).resolve().parents[1]
AGENT_DIR = ROOT / "examples" / "js_calc_agent"
LLM_CLI = ROOT / ".agl" / "llm-venv" / "bin" / "llm"
LLM_HOME = ROOT / ".agl" / "llm-home"
AGL = [sys.executable, "-m", "agl_stream.cli.main"]
#: the system prompt the CLI agent is run with (the arithmetic example's)
CLI_SYSTEM_PROMPT = "You are a calculator. Reply with only the final number, nothing else."


@dataclass(frozen=True)
class ProgramAgent:
    """What the demo runs per attempt, the model name it asks for, and its task."""

    spec: dict[str, Any]
    model_name: str
    data: Path
    missing: Optional[str]  #: why it cannot run here, or None
    source: Optional[Path] = None  #: a third party's file run unchanged: its hash goes in the report
    proxy_args: tuple[str, ...] = ()  #: extra options of the LLM proxy in front of the engine
    batcher: Optional[dict[str, Any]] = None  #: changes to the demo's batcher settings


def program_agent(name: str, model: str) -> ProgramAgent:
    if name == "js":
        node = shutil.which("node")
        missing = None if node and (AGENT_DIR / "node_modules" / "openai").is_dir() else \
            "Node.js 20+ and the agent's npm packages are needed: install Node.js, then `make js-agent`"
        spec = {"argv": [node or "node", str(AGENT_DIR / "agent.mjs")], "env": {"AGENT_MODEL": model},
                "limits": {"timeout_seconds": 300}}  # fmt: skip
        return ProgramAgent(spec, model, ROOT / "examples" / "calc_agent" / "data", missing)
    if name == "llm":
        missing = None if LLM_CLI.exists() and (LLM_HOME / "logs.db").exists() else "the llm CLI is needed: `make cli-agent`"
        spec = {"argv": [str(LLM_CLI), "--no-log", "-m", "gpt-4o-mini", "-s", CLI_SYSTEM_PROMPT, "{input.question}"],
                "input": {"argv_template": True}, "limits": {"timeout_seconds": 300},
                # its user folder, set up once by `make cli-agent` (concurrent first runs race on its database)
                "env": {"LLM_USER_PATH": str(LLM_HOME)},
                "check": [sys.executable, str(ROOT / "examples" / "cli_agent" / "check.py")]}  # fmt: skip
        return ProgramAgent(spec, "gpt-4o-mini", ROOT / "examples" / "arithmetic" / "data", missing)
    if name == "gsm8k":
        upstream = Path(os.environ.get("AGL_UPSTREAM_REPO", ROOT / ".agl" / "agent-lightning-v1.0.0"))
        folder = upstream / "examples" / "gsm8k"
        missing = None if (folder / "gsm8k_agent.py").exists() else (
            f"upstream's GSM8K example is needed at {folder}: `git clone --depth 1 --branch v1.0.0 "
            "https://github.com/microsoft/agent-lightning` and point AGL_UPSTREAM_REPO at it")
        # upstream's train_gsm8k_agent.py: agent_class examples.gsm8k.gsm8k_agent.ChatAgent, env_map QUESTION/ANSWER;
        # run from its own folder so that `gsm8k_agent` is upstream's file (this repository has an `examples` too)
        spec = {"argv": [sys.executable, "-m", "agl_stream_controller.python_agent", "gsm8k_agent:ChatAgent"],
                "cwd": str(folder), "input": {"env_map": {"QUESTION": "input.question", "ANSWER": "input.answer"}},
                "limits": {"timeout_seconds": 300}}  # fmt: skip
        # the agent asks for model "auto", as upstream's gateway serves its one model under any name
        # it asks for max_tokens=1024 ("solve step by step"): more than the CPU engine generates for 16 agents within
        # the attempt's 300 s, so the proxy lowers it (model_info.max_tokens); the agent is not changed
        # SmolLM2-135M rarely finishes upstream's step-by-step format right (1 of 17 held-out answers in a first run):
        # with dynamic sampling nearly every group would be left out, so here every group trains (those with equal
        # rewards move nothing); this shows the unchanged agent trained through the controller, not that it learns
        return ProgramAgent(spec, "auto", ROOT / "examples" / "arithmetic" / "data", missing, folder / "gsm8k_agent.py",
                            ("--max-tokens", "192"), {"drop_zero_variance": False})
    raise SystemExit(f"usage: python -m examples.controller_demo js|llm|gsm8k (not {name!r})")


def load_rows(data: Path, name: str, limit: Optional[int] = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (data / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def wait_until_up(url: str, proxy: ServiceProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proxy.check()
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"the LLM proxy did not answer at {url} within {timeout:.0f} s")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "httpx", "LiteLLM", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    name = sys.argv[1] if len(sys.argv) > 1 else "js"
    steps, train_seconds, seed, model, n_val, eval_samples = demo_knobs()
    program = program_agent(name, model)
    if program.missing is not None:
        console.print(f"[red]{program.missing}")
        return 2
    data_dir = Path(os.environ.get("AGL_DATA_DIR", ROOT / ".agl" / f"{name}-demo"))
    if data_dir.exists() and "AGL_DATA_DIR" not in os.environ:
        shutil.rmtree(data_dir)
    settings = Settings.from_env(data_dir=data_dir, kafka_session_timeout_ms=6000)
    train, val = load_rows(program.data, "train"), load_rows(program.data, "val", n_val)

    import torch

    from agl_stream import RL

    torch.manual_seed(seed)
    console.rule(f"[bold]agl-stream {name}-demo: a program, run unchanged per attempt by the controller, learns its task")
    started = time.monotonic()
    engine_port, proxy_port = free_port(), free_port()
    config = trainer_config(steps, model, seed, train_seconds)
    config["run_id"] = "demo"  # the summary's queries select this run
    config["engine"] = {**config["engine"], "port": engine_port}
    config["batcher"] = {**config["batcher"], **(program.batcher or {})}
    logs = data_dir / "logs"
    with local_broker(settings, log_file=logs / "broker.log", data_dir=data_dir / "broker") as broker:
        settings = Settings.model_validate({**settings.model_dump(), "kafka_bootstrap": broker.bootstrap})
        # the processors as a job's own stack starts them (Trainer.fit would, with a broker of its own; the proxy
        # needs the broker first), then the proxy in front of the learner's engine, which starts with the learner
        stack = LocalStack(settings, processors=True, log_dir=logs)
        asyncio.run(stack.start())
        proxy = ServiceProcess("proxy", [*AGL, "ingest", "proxy", "--backend",
                                         f"{program.model_name}=http://127.0.0.1:{engine_port}/v1",
                                         "--port", str(proxy_port),
                                         # a CPU engine answering 16 agents at once: long answers take minutes
                                         "--request-timeout", "900", *program.proxy_args],
                                env=stack.env(), log_path=logs / "proxy.log").start()  # fmt: skip
        try:
            wait_until_up(f"http://127.0.0.1:{proxy_port}/health", proxy)
            spec = CommandSpec.model_validate(program.spec)
            agent = CommandAgent(spec, proxy_url=f"http://127.0.0.1:{proxy_port}", logs_dir=data_dir / "attempts")
            console.print(f"{len(train)} training questions in GRPO groups of 4, {len(val)} held-out questions x "
                          f"{eval_samples} answers, {steps} learner steps, model {model}, seed {seed}; the agent: "
                          f"{' '.join(spec.argv)}; logs in {logs}")  # fmt: skip
            algorithm = RL(config, output_dir=data_dir / "run", eval_samples=eval_samples)
            report = Trainer(algorithm, n_runners=1, runner_concurrency=16, settings=settings).fit(agent, train, val)
            if program.source is not None:
                report["agent_source"] = {"path": str(program.source), "sha256": sha256(program.source.read_bytes()).hexdigest()}
                console.print(f"the agent, run unchanged: {program.source} (sha256 {report['agent_source']['sha256']})")
                (data_dir / "run" / "report.json").write_text(json.dumps(report, indent=2))
        finally:
            proxy.stop()
            stack.stop()
    present(settings, report, ROOT / "reports" / f"{name}-demo-seed{seed}.png", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
