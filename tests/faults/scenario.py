"""What every fault scenario shares: its two sizes, waiting on the pipeline, counting statuses, the verdict."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import pytest

from agl_stream.client import StoreClient
from tests.faults.audit import Audit, Enqueued
from tests.faults.harness import Pipeline


def reduced_or_full(reduced: int, full: int) -> list[object]:
    """The reduced size runs in ``make test``; the full one only under ``make chaos``."""
    return [pytest.param(reduced, id="reduced"), pytest.param(full, id="full", marks=pytest.mark.chaos)]


async def until(predicate: Callable[[], bool], timeout: float, what: str, pipe: Pipeline) -> None:
    """Poll ``predicate``; fail with the processors' log tail on timeout, or at once if they crashed."""
    deadline = time.monotonic() + timeout
    while not predicate():
        pipe.processors.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}:\n{pipe.processors.tail()[-3000:]}")
        await asyncio.sleep(0.1)


def count(store: StoreClient, enq: Enqueued, *wanted: str) -> int:
    """Rollouts of ``enq`` in one of the ``wanted`` statuses, as the client sees ``agl.rollouts``."""
    return sum(1 for rid in enq.tasks if (s := store.view.snapshot(rid)) is not None and s.rollout.status in wanted)


def assert_exactly_once(result: Audit) -> None:
    assert result.succeeded == result.enqueued, result.problems[:20]
    assert result.duplicates == 0, result.problems[:20]
    assert result.lost == 0, result.problems[:20]
    assert not result.problems, result.problems[:20]
