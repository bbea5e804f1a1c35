"""Regenerate ``sequence_ids.json``: OTLP deliveries of upstream-exported spans and the sequence ids
Agent Lightning 0.3.0's own store gives them.

One command, from the repository root::

    python3 -m tests.agl_stream.adapter.golden.generate_sequence_ids [--venv DIR] [--output FILE]

It runs ``record_sequence_ids.py`` with the side venv's python (``make upstream`` creates the venv;
this creates it too when missing): once per tracer (``live``: upstream's runner, tracer and store
server, exporting natively over OTLP), then once to build the deliveries and number them with fresh
upstream stores (``derive``). Offline; about half a minute. Standard library only.
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

from tests.agl_stream.adapter.golden.generate import (
    DEFAULT_VENV,
    RECORD_ENV,
    VERSIONS_OF,
    _installed_version,
    ensure_venv,
)

HERE = Path(__file__).resolve().parent
RECORDER = HERE / "record_sequence_ids.py"
DATA_PATH = HERE / "sequence_ids.json"
REGENERATE_COMMAND = "python3 -m tests.agl_stream.adapter.golden.generate_sequence_ids"
FORMAT_VERSION = 1
PROCESSES = ("otel", "agentops")

NOTES = {
    "recording": (
        "live: rollouts run by upstream's LitAgentRunner with OtelTracer (record.py's otel_nested_agents, "
        "otel_overlapping_calls with a retried second attempt, otel_several_traces) and with AgentOpsTracer "
        "(agentops_intermediate_then_final with a retried attempt, agentops_nested_agents) against upstream's "
        "LightningStoreServer over an InMemoryLightningStore; the tracers export natively over OTLP, without "
        "sequence ids (OtelTracer: one request per span; AgentOps: batches). Agents return no final reward, "
        "which upstream's runner would add over REST rather than OTLP."
    ),
    "deliveries": (
        "native/*: the tracers' requests (native/protobuf/many: the exact bytes they sent and the live store's "
        "answer); '/one' merges them into one gzip request. replay/*: the spans upstream stored, re-exported by "
        "the stock OTLP exporter (upstream's LightningStoreOTLPExporter's base) with their stored sequence ids, "
        "rollouts interleaved, placed per rollout as 'placements' says: span attribute, resource attribute, "
        "both (the resource's is 1000 off: the span's must win), decimal string, or on every other span only "
        "(the rest numbered by the store). '/many': one request per span; '/one': all in one gzip request. "
        "JSON bodies are the same requests in OTLP/JSON (hex ids), with the same compression."
    ),
    "expected": (
        "[rollout_id, attempt_id, span_id, sequence_id] as upstream's store keeps them after receiving the "
        "delivery's requests in order (a fresh store per delivery; query_spans order). Every delivery has "
        "rollout ids of its own."
    ),
}


def run(python: Path, args: list[str], workdir: Path) -> None:
    done = subprocess.run([str(python), str(RECORDER), *args], env={**os.environ, **RECORD_ENV}, cwd=workdir,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"record_sequence_ids.py {args[0]} failed (exit {done.returncode})")
    for line in done.stderr.splitlines():
        if line.startswith(("recorded ", "derived ")):
            print(line, file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python3 -m {__package__}.generate_sequence_ids",
                                     description=(__doc__ or "").splitlines()[0])  # fmt: skip
    parser.add_argument("--venv", type=Path, default=Path(os.environ.get("AGL_UPSTREAM_VENV", DEFAULT_VENV)),
                        help="side venv with agentlightning 0.3.0 (made if missing)")  # fmt: skip
    parser.add_argument("--output", type=Path, default=DATA_PATH)
    args = parser.parse_args(argv)
    python = ensure_venv(args.venv.resolve())
    with tempfile.TemporaryDirectory(prefix="agl-seq-") as tmp:
        work = Path(tmp)
        materials = []
        for process in PROCESSES:
            out = work / f"{process}.json"
            run(python, ["live", "--process", process, "--out", str(out)], work)
            materials.append(str(out))
        run(python, ["derive", "--material", *materials, "--out", str(work / "data.json")], work)
        derived: dict[str, Any] = json.loads((work / "data.json").read_text())
    data = {
        "format": FORMAT_VERSION,
        "regenerate": REGENERATE_COMMAND,
        "upstream_versions": {name: _installed_version(python, name) for name in VERSIONS_OF},
        "notes": NOTES,
        **derived,
    }
    text = json.dumps(data, indent=1) + "\n"
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(data['deliveries'])} deliveries, {len(text) // 1024} KiB)", file=sys.stderr)


if __name__ == "__main__":
    main()
