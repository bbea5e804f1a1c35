"""Try the RAG agent on a few questions: Agent Lightning's ``examples/rag/rag_run_dev.py``, ported to agl-stream.

``Trainer.dev`` runs the tasks through the real pipeline (broker, processors, ClickHouse, a runner)
with ``Baseline``, which logs each rollout's spans and triplets. It needs an OpenAI-compatible server
with tool calling (upstream: vLLM with Qwen2.5-1.5B-Instruct; on the CPU: ``agl-stream serve --model
smollm2``, which serves hermes tool calls) and, unlike upstream, starts the retriever itself::

    agl-stream serve --model smollm2 &
    python examples/ported/rag/rag_run_dev.py [--endpoint http://localhost:8000/v1] [--model smollm2]
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import pandas as pd
from rag_agent import RAGAgent
from train_rag import DATA, ROOT, retriever_server

import agl_stream as agl


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the RAG agent on a few held-out questions (Trainer.dev).")
    parser.add_argument("--endpoint", default="http://localhost:8000/v1", help="the OpenAI-compatible server")
    parser.add_argument("--model", default="smollm2", help="the served model's name")
    parser.add_argument("--limit", type=int, default=5, help="questions to run")
    parser.add_argument("--mcp-port", type=int, default=8099)
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".agl" / "rag_agent_dev",
                        help="the run's broker, ClickHouse and logs (emptied first)")
    args = parser.parse_args()

    # 1. the dataset (upstream: dataset_tiny.parquet, or a made-up question when it is missing)
    dataset_path = DATA / "val.jsonl"
    if os.path.exists(dataset_path):
        data = pd.read_json(dataset_path, lines=True).head(args.limit).to_dict("records")
    else:
        print(f"Warning: {dataset_path} not found. Using a made-up question.")
        data = [{"question": "Who built Harrow Lighthouse?", "answer": "Ada Quill"}]

    # 2. the LLM resource
    resources = {
        "main_llm": agl.LLM(endpoint=args.endpoint, model=args.model, sampling_parameters={"temperature": 0.0}),
    }

    # 3. the agent, through the pipeline, with the retriever beside it
    shutil.rmtree(args.data_dir, ignore_errors=True)  # a fresh run: its own ClickHouse tables and logs
    settings = agl.Settings.from_env(data_dir=args.data_dir, kafka_session_timeout_ms=6000)
    with retriever_server(args.mcp_port, args.data_dir / "retriever.log") as mcp_url:
        trainer = agl.Trainer(dev=True, initial_resources=resources, settings=settings)
        trainer.dev(RAGAgent(mcp_server_url=mcp_url), train_dataset=data)


if __name__ == "__main__":
    main()
