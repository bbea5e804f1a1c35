"""Regenerate ``frameworks.json``: each framework agent's LLM calls and Agent Lightning 0.3.0's answer for them.

One command, from the repository root (``make golden`` runs it after ``make setup``)::

    python3 -m tests.agl_stream.adapter.golden.generate_frameworks [--venv DIR] [--agl-python PY] [--output FILE]

1. ``frameworks.py record`` with agl-stream's python (``.venv``): every :data:`~.frameworks.FRAMEWORK_CASES`
   agent runs once under agl-stream's tracer against the scripted engine; its chat exchanges (and, for the
   Anthropic agents, the Messages requests) and its reward are recorded.
2. ``record_frameworks.py`` with the python of a side venv holding ``agentlightning==0.3.0`` and the framework
   SDKs its replay needs (``.agl/upstream-frameworks-venv``, created here from the committed constraints, never
   a dependency of agl-stream): the same calls through upstream's runner with ``AgentOpsTracer``, then with
   ``OtelTracer`` and its ``LLMProxy`` (one process each), against a server answering with the recorded
   responses; upstream's triplets of them.

Needs the package index once for the side venv (about a minute); the rest runs offline. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.agl_stream.adapter.golden.generate import RECORD_ENV, VERSIONS_OF, _installed_version
from tests.agl_stream.adapter.golden.spec import (
    CONSTRAINTS_PATH,
    FORMAT_VERSION,
    FRAMEWORKS_PATH,
    FRAMEWORKS_REGENERATE_COMMAND,
    REQUIRED_FRAMEWORKS,
    UPSTREAM_FRAMEWORKS_CONSTRAINTS_PATH,
    UPSTREAM_VERSION,
)

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[3]
RECORDER = HERE / "record_frameworks.py"
DEFAULT_VENV = REPO_ROOT / ".agl" / "upstream-frameworks-venv"
DEFAULT_AGL_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
PROCESSES = ("agentops", "proxy")
#: the framework SDKs upstream's replay makes calls with, beside agentlightning (pinned in the constraints file)
FRAMEWORK_PACKAGES = ("anthropic",)

NOTES = {
    "recording": (
        "Each case is one rollout of a real framework agent (the framework stack tests' agents, the LangGraph "
        "example) run under agl-stream's own tracer (OtelTracer with the instrumentations a runner arms; the "
        "returned reward recorded as the runner records it) against replay_vllm.ReplayVllm forwarding to the "
        "framework tests' scripted engine (ToolVllm; the Anthropic agents through their Messages front). "
        "'exchanges' are the engine's requests and answers as sent (streams as their chunks); "
        "'messages_requests' the Anthropic SDK's requests to the front; 'reward' what the agent returned."
    ),
    "upstream": (
        "upstream.agentops: the same calls made again inside upstream's LitAgentRunner.step with AgentOpsTracer "
        "against a server answering with the recorded responses: chat calls with upstream's openai client (the "
        "server refuses any request but the recorded one, stream_options aside, which AgentOps adds to streams) "
        "or, for litellm cases, upstream's pinned litellm with the case's provider; 'triplets' are "
        "TracerTraceToTriplet() of the stored spans; 'error' where upstream's stack fails the call. Anthropic "
        "calls go through an LLMProxy (upstream's only Messages endpoint) and their triplets match AgentOps' "
        "anthropic.messages.create spans (the default match finds none of them). upstream.proxy: the same "
        "client calls through upstream's LLMProxy (thread mode) with OtelTracer, LlmProxyTraceToTriplet of the "
        "stored spans: upstream's path for SDKs its tracer does not instrument, which keeps the token ids of "
        "streamed calls (it makes them plain calls to the engine). 'engine_requests' are what upstream sent."
    ),
    "test": (
        "tests/agl_stream/adapter/test_golden_frameworks.py runs each agent again under agl-stream's tracer "
        "against the recorded answers (the server refusing any other request, so the calls are the same) and "
        "holds agl-stream's TracerTraceToTriplet() triplets of its spans to these answers."
    ),
}


def ensure_venv(venv: Path) -> Path:
    """The side venv's python: agentlightning 0.3.0 and the replay's framework SDKs, from the committed pins."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating side venv {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = dict(line.split("==", 1) for line in UPSTREAM_FRAMEWORKS_CONSTRAINTS_PATH.read_text().splitlines()
                if "==" in line and not line.startswith("#"))  # fmt: skip
    wanted = {"agentlightning": UPSTREAM_VERSION, **{name: pins[name] for name in FRAMEWORK_PACKAGES}}
    if any(_installed_version(python, name) != version for name, version in wanted.items()):
        print(f"installing {wanted} into {venv} (about a minute)", file=sys.stderr)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-c", str(CONSTRAINTS_PATH), "-c", str(UPSTREAM_FRAMEWORKS_CONSTRAINTS_PATH),
             *(f"{name}=={version}" for name, version in wanted.items())],
            check=True,
        )  # fmt: skip
    return python


def _run(command: list[str], what: str, env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    for line in done.stderr.splitlines():
        if line.startswith(("recorded ", "replayed ")):
            print(line, file=sys.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"{what} failed (exit {done.returncode})")


def record_calls(agl_python: Path, out: Path) -> list[dict[str, Any]]:
    """Step 1: the framework agents' calls, with agl-stream's python."""
    _run([str(agl_python), "-m", "tests.agl_stream.adapter.golden.frameworks", "record", "--out", str(out)],
         "recording the framework agents", {**os.environ, **RECORD_ENV}, REPO_ROOT)  # fmt: skip
    cases: list[dict[str, Any]] = json.loads(out.read_text())
    for case in cases:  # upstream's replay tells the agent's calls from a proxy's health probes by this
        unasked = [i for i, e in enumerate(case["exchanges"]) if not e["request"].get("return_token_ids")]
        if unasked:
            raise SystemExit(f"{case['name']}: calls {unasked} asked for no token ids")
    return cases


def replay_upstream(python: Path, exchanges: Path, workdir: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Step 2: upstream's answers, by case name then process."""
    answers: dict[str, dict[str, dict[str, Any]]] = {}
    for process in PROCESSES:
        out = workdir / f"{process}.json"
        _run([str(python), str(RECORDER), "--process", process, "--exchanges", str(exchanges), "--out", str(out)],
             f"upstream's {process} replay", {**os.environ, **RECORD_ENV}, workdir)  # fmt: skip
        for answer in json.loads(out.read_text()):
            answers.setdefault(answer.pop("name"), {})[process] = answer
    return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m tests.agl_stream.adapter.golden.generate_frameworks",
                                     description=(__doc__ or "").splitlines()[0])  # fmt: skip
    parser.add_argument("--venv", type=Path, default=Path(os.environ.get("AGL_UPSTREAM_FRAMEWORKS_VENV", DEFAULT_VENV)),
                        help="side venv: agentlightning 0.3.0 and the replay's SDKs (made if missing)")  # fmt: skip
    parser.add_argument("--agl-python", type=Path, default=DEFAULT_AGL_PYTHON,
                        help="agl-stream's python, with the frameworks installed (make setup)")  # fmt: skip
    parser.add_argument("--output", type=Path, default=FRAMEWORKS_PATH)
    args = parser.parse_args(argv)
    python = ensure_venv(args.venv.resolve())
    with tempfile.TemporaryDirectory(prefix="agl-golden-frameworks-") as tmp:
        work = Path(tmp)
        cases = record_calls(args.agl_python, work / "exchanges.json")
        answers = replay_upstream(python, work / "exchanges.json", work)
    missing = sorted(set(REQUIRED_FRAMEWORKS) - {case["framework"] for case in cases})
    if missing:
        raise SystemExit(f"no case of {missing}")
    data = {
        "format": FORMAT_VERSION,
        "regenerate": FRAMEWORKS_REGENERATE_COMMAND,
        "upstream_versions": {name: _installed_version(python, name) for name in (*VERSIONS_OF, *FRAMEWORK_PACKAGES)},
        "required_frameworks": list(REQUIRED_FRAMEWORKS),
        "notes": NOTES,
        "cases": [{**case, "upstream": answers[case["name"]]} for case in cases],
    }
    text = json.dumps(data, indent=1) + "\n"
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(cases)} cases, {len(text) // 1024} KiB)", file=sys.stderr)


if __name__ == "__main__":
    main()
