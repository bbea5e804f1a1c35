"""Optimize the room selector's prompt with APO against any OpenAI-compatible endpoint.

    AGL_APO_API_BASE=https://api.openai.com/v1 AGL_APO_API_KEY=sk-... \\
        python -m examples.room_selector.train_apo

Environment (the agent model and the critique/edit model may differ):

* ``AGL_APO_API_BASE``   OpenAI-compatible base URL, e.g. ``http://localhost:8000/v1`` (required)
* ``AGL_APO_API_KEY``    its API key (falls back to ``OPENAI_API_KEY``; empty for local servers)
* ``AGL_APO_MODEL``      the critique/edit model, a litellm name (default ``openai/gpt-4o-mini``)
* ``AGL_APO_AGENT_MODEL`` the model the agent calls (default: ``AGL_APO_MODEL`` without ``openai/``)
* ``AGL_APO_AGENT_API_BASE`` / ``AGL_APO_AGENT_API_KEY`` another endpoint for the agent (optional)

Exits with status 2 and says what to set when no endpoint is configured.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (HERE / "data" / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="beam rounds (default 2)")
    parser.add_argument("--beam-width", type=int, default=2)
    parser.add_argument("--branch-factor", type=int, default=2)
    parser.add_argument("--gradient-batch-size", type=int, default=4)
    parser.add_argument("--val-batch-size", type=int, default=16)
    parser.add_argument("--runners", type=int, default=1, help="runner processes")
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts per runner process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=None, help="where the local stack keeps its data")
    parser.add_argument("--output", type=Path, default=None, help="write the report (JSON) here")
    args = parser.parse_args(argv)

    api_base = os.environ.get("AGL_APO_API_BASE")
    if not api_base:
        print(
            "No OpenAI-compatible endpoint configured. Set at least:\n"
            "  AGL_APO_API_BASE   base URL, e.g. https://api.openai.com/v1 or http://localhost:8000/v1\n"
            "and as needed:\n"
            "  AGL_APO_API_KEY    API key (or OPENAI_API_KEY)\n"
            "  AGL_APO_MODEL      critique/edit model as a litellm name (default openai/gpt-4o-mini)\n"
            "  AGL_APO_AGENT_MODEL, AGL_APO_AGENT_API_BASE, AGL_APO_AGENT_API_KEY  a different model for the agent\n"
            "See examples/room_selector/README.md.",
            file=sys.stderr,
        )
        return 2

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # hosted APIs reject vLLM's return_token_ids; APO needs only the messages, not token ids
    os.environ.setdefault("AGL_REQUEST_TOKEN_IDS", "0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from agl_stream.config import Settings
    from agl_stream.trainer import Trainer
    from agl_stream.types import LLM, PromptTemplate
    from examples.room_selector.agent import INITIAL_TEMPLATE
    from agl_stream import APO

    api_key = os.environ.get("AGL_APO_API_KEY") or os.environ.get("OPENAI_API_KEY")
    model = os.environ.get("AGL_APO_MODEL", "openai/gpt-4o-mini")
    agent_model = os.environ.get("AGL_APO_AGENT_MODEL") or (model.split("/", 1)[1] if model.startswith("openai/") else model)
    agent_base = os.environ.get("AGL_APO_AGENT_API_BASE") or api_base
    agent_key = os.environ.get("AGL_APO_AGENT_API_KEY") or api_key

    apo = APO(model=model, api_base=api_base, api_key=api_key, gradient_batch_size=args.gradient_batch_size,
              val_batch_size=args.val_batch_size, beam_width=args.beam_width, branch_factor=args.branch_factor,
              beam_rounds=args.rounds, seed=args.seed)  # fmt: skip
    resources = {
        "llm": LLM(endpoint=agent_base, model=agent_model, api_key=agent_key),
        "prompt_template": PromptTemplate(template=INITIAL_TEMPLATE),
    }
    overrides = {"data_dir": args.data_dir} if args.data_dir else {}
    settings = Settings.from_env(**overrides)
    trainer = Trainer(apo, n_runners=args.runners, runner_concurrency=args.concurrency, initial_resources=resources, settings=settings)
    report = trainer.fit("examples.room_selector.agent:room_selector", load("train"), load("val"))
    if report is None:  # stopped (Ctrl+C)
        return 130

    print("\nvalidation score per round (best of the beam):")
    for entry in report["history"]:
        print(f"  round {entry['round']}: {max(s for s in entry['beam_scores'] if s is not None):.3f}")
    print(f"initial {report['initial_score']:.3f} -> best {report['best_score']:.3f} "
          f"(val batch of {report['val_batch_size']}, {report['rejected']} rewrite(s) rejected)")  # fmt: skip
    print(f"\nbest template:\n{report['best_template']}")
    if args.output:
        args.output.write_text(json.dumps(report, indent=2))
        print(f"\nreport written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
