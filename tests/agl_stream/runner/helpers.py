"""Reading what a runner wrote, straight from the broker."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

from pydantic import BaseModel

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer, RecordProducer

M = TypeVar("M", bound=BaseModel)


async def collect(
    settings: Settings, short_name: str, model: type[M], done: Callable[[list[M]], bool], timeout: float = 30.0
) -> list[M]:
    """Records of a topic (all partitions, from the start) until ``done(records)`` or the timeout."""
    consumer = RecordConsumer(settings, [settings.topic(short_name)], group_id=None)
    await consumer.start()
    out: list[M] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(out) and time.monotonic() < deadline:
            good, bad = await consumer.get_decoded(model, timeout=0.3)
            assert not bad, [b.error.reason for b in bad]
            out.extend(d.value for d in good)
    finally:
        await consumer.stop(commit=False)
    return out


async def produce_raw(settings: Settings, short_name: str, records: list[tuple[str, bytes]]) -> None:
    async with RecordProducer(settings) as producer:
        for key, value in records:
            await producer.send_and_wait(settings.topic(short_name), value, key=key)


async def run_with_timeout(coro: "asyncio.Future[object] | object", timeout: float = 90.0) -> object:
    return await asyncio.wait_for(coro, timeout)  # type: ignore[arg-type]
