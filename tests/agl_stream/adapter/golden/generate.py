"""Regenerate the golden parity corpus (``corpus.json``) with Agent Lightning 0.3.0's own code.

One command, from the repository root::

    make golden                                       # or:
    python3 -m tests.agl_stream.adapter.golden.generate [--venv DIR] [--output FILE]

It creates (once) a side venv with ``agentlightning==0.3.0`` pinned by the committed constraints
file, never a dependency of agl-stream, then runs ``record.py`` with that venv's python once per
recording process (AgentOps tracer, OTel tracer, LLM proxy: each installs its own global
OpenTelemetry provider) and merges their cases into one JSON file with its metadata. Needs the
package index once (about a minute); the recording itself runs offline against a local server.
Standard library only, so any python3 can run it.
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

from tests.agl_stream.adapter.golden.spec import (
    CONSTRAINTS_PATH,
    CORPUS_PATH,
    DELIVERIES,
    FORMAT_VERSION,
    RECORDER_PATH,
    REGENERATE_COMMAND,
    REQUIRED_SHAPES,
    UPSTREAM_VERSION,
)

REPO_ROOT = Path(__file__).resolve().parents[4]
DEFAULT_VENV = REPO_ROOT / ".agl" / "upstream-venv"  # the side venv `make upstream` creates
PROCESSES = ("agentops", "otel", "proxy")
VERSIONS_OF = ("agentlightning", "agentops", "openai", "litellm", "opentelemetry-sdk", "pydantic")
RECORD_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AGENTOPS_LOGGING_TO_FILE": "False"}


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _installed_version(python: Path, package: str) -> str:
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else ""


def ensure_venv(venv: Path) -> Path:
    """The side venv's python, creating the venv and installing upstream when needed."""
    python = _python(venv)
    if not python.exists():
        print(f"creating side venv {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if _installed_version(python, "agentlightning") != UPSTREAM_VERSION:
        print(f"installing agentlightning=={UPSTREAM_VERSION} into {venv} (about a minute)", file=sys.stderr)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-c", str(CONSTRAINTS_PATH), f"agentlightning=={UPSTREAM_VERSION}"],
            check=True,
        )  # fmt: skip
    return python


def record(python: Path, process: str, workdir: Path) -> list[dict[str, Any]]:
    out = workdir / f"{process}.json"
    print(f"recording the {process} cases", file=sys.stderr)
    done = subprocess.run(
        [str(python), str(RECORDER_PATH), "--process", process, "--out", str(out)],
        env={**os.environ, **RECORD_ENV}, cwd=workdir, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0 or not out.exists():
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"recording {process} failed (exit {done.returncode})")
    return json.loads(out.read_text())


def build_corpus(python: Path, cases: list[dict[str, Any]]) -> dict[str, Any]:
    covered = {shape for case in cases for shape in case["shapes"]}
    missing = [shape for shape in REQUIRED_SHAPES if shape not in covered]
    if missing:
        raise SystemExit(f"the recorded cases miss required shapes: {missing}")
    return {
        "format": FORMAT_VERSION,
        "regenerate": REGENERATE_COMMAND,
        "upstream_versions": {name: _installed_version(python, name) for name in VERSIONS_OF},
        "required_shapes": list(REQUIRED_SHAPES),
        "deliveries": list(DELIVERIES),
        "notes": {
            "recording": (
                "Every case is one rollout run by upstream's LitAgentRunner.step with upstream's own tracer "
                "(AgentOpsTracer with a real openai client, OtelTracer, or OtelTracer with upstream's LLMProxy in "
                "thread mode) against a local vLLM-like server (fake_vllm.py); spans are read back with "
                "InMemoryLightningStore.query_spans, so their order and sequence ids are upstream's. Under "
                "OtelTracer, LLM calls are OpenTelemetry GenAI spans made with the OpenTelemetry API "
                "(OtelTracer records no LLM calls by itself); agent spans carry agent.name. No case is built "
                "from hand-made Span objects."
            ),
            "upstream": (
                "'upstream' holds upstream's derivations on the stored spans: find_final_reward, the values and "
                "dimensions of find_reward_spans, TracerTraceToTriplet for every RewardMatchPolicy x agent_match "
                "x repair_hierarchy (x llm_call_match where a case lists several) as [body index, reward, "
                "agent_name] rows over triplet_bodies, LlmProxyTraceToTriplet, TraceToMessages."
            ),
            "deliveries": (
                "orders: indices into spans for creation (start time), end (end time: what exporters deliver, "
                "children before parents) and a seeded shuffle. '/sequence_ids' keeps the stored sequence ids, "
                "'/no_sequence_ids' keeps only the ids the producer sets itself (intrinsic_sequence_span_ids: "
                "LLMProxy spans) and numbers the rest on arrival, as upstream's store and agl-stream's receiver do."
            ),
            "upstream_by_delivery": (
                "upstream's derivations after each delivery (spans numbered and sorted as upstream's store would), "
                "only the keys that differ from 'upstream'. They show where upstream's own answer depends on arrival "
                "order; agl-stream must give the stored-order answer ('upstream') for every delivery, except "
                "LlmProxyTraceToTriplet, which orders by sequence id alone (upstream: 'sequence_id is treated as "
                "the sole source of ordering') and must match upstream's answer for the same numbering."
            ),
        },
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m tests.agl_stream.adapter.golden.generate",
                                     description="Regenerate the golden parity corpus with agentlightning 0.3.0.")  # fmt: skip
    parser.add_argument("--venv", type=Path, default=Path(os.environ.get("AGL_GOLDEN_VENV", DEFAULT_VENV)),
                        help="side venv for agentlightning 0.3.0 (created if missing; env AGL_GOLDEN_VENV)")  # fmt: skip
    parser.add_argument("--output", type=Path, default=CORPUS_PATH, help="corpus file to write")
    args = parser.parse_args(argv)
    python = ensure_venv(args.venv.resolve())
    with tempfile.TemporaryDirectory(prefix="agl-golden-") as tmp:
        cases = [case for process in PROCESSES for case in record(python, process, Path(tmp))]
    corpus = build_corpus(python, cases)
    text = json.dumps(corpus, indent=1, sort_keys=False) + "\n"
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(cases)} cases, {len(text) // 1024} KiB)", file=sys.stderr)


if __name__ == "__main__":
    main()
