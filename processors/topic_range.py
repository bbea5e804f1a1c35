"""Read a range of offsets of one topic partition with a plain consumer (no group): what an app re-reads when
its own consumer cannot give it the records again (the triplet processor's restore and abandoned attempts, the
state machine's skipped input records)."""

from __future__ import annotations

import time
from typing import Any

from aiokafka.structs import ConsumerRecord


async def read_range(reader: Any, tp: Any, start: int, stop: int, timeout: float = 120.0) -> list[ConsumerRecord]:
    """Records of ``tp`` with ``start <= offset < stop`` (offsets that hold no record, such as transaction markers, yield nothing)."""
    reader.assign([tp])
    reader.seek(tp, start)
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while await reader.position(tp) < stop:
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read {tp.topic}[{tp.partition}] {start}..{stop} within {timeout:.0f}s")
        batch = await reader.getmany(tp, timeout_ms=300, max_records=5000)
        out.extend(r for r in batch.get(tp, []) if r.offset < stop)
    return out
