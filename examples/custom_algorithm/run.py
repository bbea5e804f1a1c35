"""Run the custom algorithm on the local stack: ``python -m examples.custom_algorithm.run --endpoint URL --model NAME``.

The processors (state machine, triplet adapter, ClickHouse sinks) run in this process, so the
algorithm's ``query_spans`` reads the embedded ClickHouse they own (one process per data
directory); the agent runs in a runner process; the LLM is any OpenAI-compatible endpoint (vLLM,
``agl-stream serve``, a hosted API with ``AGL_REQUEST_TOKEN_IDS=0``). With ``AGL_KAFKA_BOOTSTRAP``
and a ClickHouse server in ``AGL_CLICKHOUSE_DSN`` it runs against that cluster instead (processors
are then the cluster's services).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Optional

from rich.console import Console

from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.types import LLM
from examples.custom_algorithm.algorithm import SearchResult, prompt_search

PROMPTS = [
    "{question}",
    "Answer the question with the number only. {question}",
    "You are a careful calculator. {question} Reply with the result.",
]
DATA = Path(__file__).with_name("data.jsonl")


async def run(endpoint: str, model: str, settings: Optional[Settings] = None, n_runners: int = 1) -> SearchResult:
    settings = settings or Settings.from_env()
    stack = LocalStack(settings, processors=False)
    settings = await stack.start()
    stop = asyncio.Event()
    service_task = None
    if stack.local:
        from agl_stream_processors.service import ProcessorService

        service_task = asyncio.create_task(ProcessorService(settings).run(stop))
    try:
        stack.start_runners("examples.custom_algorithm.agent:qa_agent", n_runners, concurrency=4)
        dataset = [json.loads(line) for line in DATA.read_text().splitlines()]
        async with StoreClient(settings) as store:
            return await prompt_search(store=store, llm=LLM(endpoint=endpoint, model=model), prompts=PROMPTS, dataset=dataset)
    finally:
        stop.set()
        if service_task is not None:
            await service_task
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    result = asyncio.run(run(args.endpoint, args.model))
    console = Console()
    for prompt, score in result.scores.items():
        console.print(f"{score:.2f}  {prompt!r}")
    console.print(f"[bold]best prompt[/bold]: {result.best_prompt!r} (resources {result.resources_id})")


if __name__ == "__main__":
    main()
