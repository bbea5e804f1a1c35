"""The nemesis's traffic through the store front door: enqueues, waits and span reads over upstream's REST API.

A client of a front door that a fault can kill, pause or cut off retries what failed, as upstream's store
client does: every 503, 5xx or connection error is retried once a second, up to ``RETRY_FOR`` seconds.
An enqueue that got no answer may still have been accepted: its retry gets new rollout ids (and new group
ids, so the copies form groups of their own), and the copies nobody knows the ids of are counted, not
audited. A span read that answers is checked against the workload's plan: a wrong answer is a finding.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import httpx

from tests.benchmarks.workload_agent import plan
from tests.faults.audit import Enqueued

API = "/v1/agl"
#: a client gives a front door this long to come back before a request counts as failed
RETRY_FOR = 300.0


@dataclass
class DoorStats:
    enqueued: int = 0  # rollouts the front door acknowledged (ids known, audited)
    enqueue_retries: int = 0  # enqueue requests retried after no answer or an error answer
    unanswered_batches: int = 0  # batches sent but not answered, then retried: maybe accepted too (copies not audited)
    retries: int = 0  # every retried request
    reads: int = 0  # span reads that answered and were checked
    wrong_reads: list[str] = field(default_factory=list)
    waited: int = 0  # rollouts the final wait through the front door saw terminal
    failed_requests: list[str] = field(default_factory=list)  # still failing after RETRY_FOR


class DoorClient:
    def __init__(self, url: str, stats: DoorStats) -> None:
        self.http = httpx.AsyncClient(base_url=url + API, timeout=httpx.Timeout(30.0, connect=5.0))
        self.stats = stats

    async def close(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, path: str, *, json: Any = None, params: Optional[dict[str, Any]] = None,
                      on_retry: Optional[Any] = None, retry_for: float = RETRY_FOR) -> Optional[Any]:  # fmt: skip
        """The answer's JSON, retried as upstream's client would; None once ``retry_for`` seconds are spent."""
        deadline = time.monotonic() + retry_for
        last = ""
        while time.monotonic() < deadline:
            try:
                response = await self.http.request(method, path, json=json, params=params)
                if response.status_code < 500:
                    response.raise_for_status()  # a 4xx is our mistake: the run stops here
                    return response.json()
                last = f"{response.status_code} {response.text[:200]}"
                failure: Any = response.status_code
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                last, failure = f"{type(exc).__name__}: {exc}", exc
            self.stats.retries += 1
            if on_retry is not None:
                on_retry(failure)
            await asyncio.sleep(1.0)
        self.stats.failed_requests.append(f"{method} {path}: {last}")
        return None


async def enqueue_through_door(door: DoorClient, items: list[dict[str, Any]], tasks: list[dict[str, Any]],
                               enq: Enqueued, via_door: set[str]) -> None:  # fmt: skip
    """Enqueue one batch through the front door; a retry after no answer renames the groups (see the module)."""
    attempt, unanswered = 0, False

    def retried(failure: Any) -> None:
        nonlocal attempt, unanswered
        door.stats.enqueue_retries += 1
        # a refused connection sent nothing; anything else may have published some of the batch (no answer, or
        # a 5xx after part of it reached the broker): the copies must not join the retried rollouts' groups
        if isinstance(failure, (httpx.ConnectError, httpx.ConnectTimeout)):
            return
        if isinstance(failure, Exception) and not unanswered:
            door.stats.unanswered_batches += 1
            unanswered = True
        attempt += 1
        for item in items:
            item["metadata"]["group_id"] = f"{item['metadata']['group_id'].split('~')[0]}~r{attempt}"

    rollouts = await door.request("POST", "/queues/rollouts/enqueue", json={"rollouts": items}, on_retry=retried)
    if rollouts is None:
        return
    for task, ro in zip(tasks, rollouts):
        enq.tasks[ro["rollout_id"]] = task
        enq.enqueued_at[ro["rollout_id"]] = float(ro["start_time"])
        via_door.add(ro["rollout_id"])
    door.stats.enqueued += len(rollouts)


async def read_spans(door: DoorClient, rollout_id: str, task: dict[str, Any]) -> None:
    """The spans of the attempt that ended a succeeded rollout, read through the front door (and the SQL door
    behind it): exactly the plan's, in sequence."""
    latest = await door.request("GET", f"/rollouts/{rollout_id}/attempts/latest")
    if latest is None:
        return
    page = await door.request("GET", "/spans", params={"rollout_id": rollout_id, "attempt_id": latest["attempt_id"]})
    if page is None:
        return
    door.stats.reads += 1
    spans = page.get("items", page) if isinstance(page, dict) else page
    sequence = sorted(s["sequence_id"] for s in spans)
    expected = plan(task).spans
    if sequence != list(range(1, expected + 1)):
        door.stats.wrong_reads.append(f"{rollout_id}/{latest['attempt_id']}: sequence ids {sequence[:50]}, "
                                      f"expected 1..{expected}")  # fmt: skip


async def sample_reads(door: DoorClient, succeeded: Any, enq: Enqueued, via_door: set[str], seed: int,
                       every: float = 2.0) -> None:  # fmt: skip
    """Every ``every`` seconds, read one succeeded front-door rollout's spans back (``succeeded()``: their ids)."""
    rng = random.Random(f"reads-{seed}")
    while True:
        await asyncio.sleep(every)
        done = sorted(set(succeeded()) & via_door)
        if done:
            rid = rng.choice(done)
            await read_spans(door, rid, enq.tasks[rid])


async def wait_through_door(door: DoorClient, rollout_ids: list[str], timeout: float) -> set[str]:
    """Wait (long polls of 10 s, retried through faults) until every rollout is terminal or ``timeout``."""
    pending, terminal = set(rollout_ids), set()
    deadline = time.monotonic() + timeout
    while pending and (left := deadline - time.monotonic()) > 0:
        for start in range(0, len(pending), 500):
            chunk = sorted(pending)[start : start + 500]
            # each request within the wait's own deadline: a front door that stays down ends the wait on time
            done = await door.request("POST", "/waits/rollouts", json={"rollout_ids": chunk, "timeout": min(10.0, left)},
                                      retry_for=max(1.0, left))  # fmt: skip
            terminal |= {r["rollout_id"] for r in done or []}
        pending -= terminal
    door.stats.waited = len(terminal)
    return terminal
