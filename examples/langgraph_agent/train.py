"""Train the LangGraph agent with GRPO on the local stack: ``python -m examples.langgraph_agent.train``.

Same machinery as ``make demo`` (local broker, processors, embedded ClickHouse, the embedded CPU
inference server, a runner process, the learner publishing weights), with the writer node as the
agent being trained (``agent_match="writer"``). ``--model tiny`` uses a random tiny model (seconds
per step); ``smollm2`` the real SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agl_stream.trainer import Trainer

DATA = Path(__file__).resolve().parents[1] / "arithmetic/data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    from agl_stream_trainer.rl import RL
    from examples.demo import trainer_config

    rows = [json.loads(line) for line in (DATA / "train.jsonl").read_text().splitlines()]
    tasks = [{"question": r["question"], "answer": str(r["answer"])} for r in rows]
    config = trainer_config(steps=args.steps, model=args.model)
    trainer = Trainer(RL(config), n_runners=1, runner_concurrency=8, adapter="tracer:agent_match=writer")
    report = trainer.fit("examples.langgraph_agent.agent:langgraph_agent", tasks[:64], tasks[64:80])
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
