"""Run framework agents on the local stack and read back what reached ClickHouse.

The processors service (state machine, triplet processor, ClickHouse sinks on the embedded engine) runs in
the test process against the real broker, as in the AIR pipeline test; a real :class:`LitAgentRunner` runs
the agent, so its tracer activates the instrumentations exactly as a runner process does (they are process
singletons: the first framework test activates them for the rest).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from agl_stream.client import StoreClient
from agl_stream.client.clickhouse_reader import ClickHouseReader
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import agl_command
from agl_stream.litagent import LitAgent
from agl_stream.runner import LitAgentRunner
from agl_stream.types import LLM
from tests.agl_stream.client.pipeline import processors


ROOT = Path(__file__).resolve().parents[4]
TRIPLETS_SQL = ("SELECT RolloutId, TripletIndex, PromptTokenIds, ResponseTokenIds, Metadata FROM triplets FINAL "
                "WHERE Decision = 'final' ORDER BY RolloutId, TripletIndex")


@dataclass
class TripletRow:
    rollout_id: str
    index: int
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    metadata: dict[str, Any]

    @property
    def ids(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(self.prompt_token_ids), tuple(self.response_token_ids)


@dataclass
class Run:
    """What one batch of rollouts left: ids in task order, triplets and spans by rollout."""

    rollout_ids: list[str]
    triplets: dict[str, list[TripletRow]]
    spans: dict[str, list[tuple[str, dict[str, str]]]]  # (SpanName, SpanAttributes), by time


async def run_agent(settings: Settings, agent: LitAgent[Any], llm: LLM, tasks: Sequence[dict[str, Any]],
                    expected_triplets: int) -> Run:  # fmt: skip
    """Run ``tasks`` with one runner (one at a time, in order) and wait for their final triplets and their LLM-call
    spans (one per triplet here), then for the spans table to stop growing (its sink writes in batches)."""
    async with processors(settings):
        async with StoreClient(settings) as store:
            await store.add_resources({"llm": llm})
            rollout_ids = [(await store.enqueue_rollout(task, mode="train")).rollout_id for task in tasks]
        runner = LitAgentRunner(agent, settings, max_rollouts=len(tasks), heartbeat_interval=1.0)
        stats = await asyncio.wait_for(runner.run(), 180)
        assert stats.rollouts_succeeded == len(tasks) and stats.rollouts_failed == 0, stats
        return await _collect(settings, rollout_ids, expected_triplets)


async def run_agent_in_venv(settings: Settings, python: Path, agent: str, llm: LLM, tasks: Sequence[dict[str, Any]],
                            expected_triplets: int, *, timeout: float = 240.0,
                            env: Optional[Mapping[str, str]] = None) -> Run:  # fmt: skip
    """As :func:`run_agent`, with the runner an ``agl-stream runner --agent MODULE:OBJECT`` process started by
    ``python`` (the frameworks side venv: AutoGen and CrewAI cannot install beside the stack's pins); the
    broker, processors and ClickHouse run here. ``env`` adds to the runner's environment (a framework's
    opt-outs of its own telemetry, say). The runner's output is in the failure message."""
    async with processors(settings):
        async with StoreClient(settings) as store:
            await store.add_resources({"llm": llm})
            rollout_ids = [(await store.enqueue_rollout(task, mode="train")).rollout_id for task in tasks]
        runner_env = {**os.environ, **LocalStack(settings).env(), "PYTHONPATH": str(ROOT), **(env or {})}
        done = await asyncio.to_thread(
            subprocess.run,
            agl_command("runner", "--agent", agent, "--max-rollouts", str(len(tasks)), "--heartbeat-interval", "1",
                        "--no-progress", python=python),
            capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=runner_env,
        )  # fmt: skip
        assert done.returncode == 0, f"runner exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        return await _collect(settings, rollout_ids, expected_triplets)


async def _collect(settings: Settings, rollout_ids: list[str], expected_triplets: int) -> Run:
    reader = ClickHouseReader(settings.effective_clickhouse_dsn)
    try:
        rows = await _wait_rows(reader, TRIPLETS_SQL, expected_triplets)
        await _wait_rows(reader, "SELECT 1 FROM spans FINAL WHERE SpanName = 'openai.chat.completion'",
                         expected_triplets)  # fmt: skip
        span_rows = await _settled(reader, "SELECT RolloutId, SpanName, SpanAttributes FROM spans FINAL "
                                           "ORDER BY RolloutId, Timestamp")  # fmt: skip
    finally:
        await reader.close()
    triplets: dict[str, list[TripletRow]] = {rid: [] for rid in rollout_ids}
    for rid, index, prompt, response, metadata in rows:
        triplets.setdefault(rid, []).append(TripletRow(rid, index, list(prompt), list(response), json.loads(metadata)))
    spans: dict[str, list[tuple[str, dict[str, str]]]] = {rid: [] for rid in rollout_ids}
    for rid, name, attributes in span_rows:
        spans.setdefault(rid, []).append((name, dict(attributes)))
    return Run(rollout_ids, triplets, spans)


async def _wait_rows(reader: ClickHouseReader, sql: str, count: int, timeout: float = 90.0) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + timeout
    while True:
        rows = (await reader.query(sql))[1]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.5)


async def _settled(reader: ClickHouseReader, sql: str, timeout: float = 30.0) -> list[tuple[Any, ...]]:
    """The rows once two reads a second apart agree on their number."""
    deadline, rows = time.monotonic() + timeout, (await reader.query(sql))[1]
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        again = (await reader.query(sql))[1]
        if len(again) == len(rows):
            return again
        rows = again
    return rows


def returned_pairs(returned: Iterable[Any]) -> Counter[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The engine's (prompt ids, response ids) per request, as a multiset."""
    pairs = [(r["prompt_token_ids"], r["response_token_ids"]) if isinstance(r, dict)
             else (r.prompt_token_ids, r.response_token_ids) for r in returned]  # fmt: skip
    return Counter((tuple(p), tuple(q)) for p, q in pairs)


def llm_call_spans(spans: Sequence[tuple[str, dict[str, str]]]) -> list[dict[str, str]]:
    return [attrs for name, attrs in spans if name == "openai.chat.completion"]
