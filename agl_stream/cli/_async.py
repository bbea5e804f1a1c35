"""Run a coroutine from a CLI command with Ctrl+C / SIGTERM turned into a clean cancellation."""

from __future__ import annotations

import asyncio
import signal
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")


def run_until_signal(make: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run ``make(stop_event)``; SIGINT/SIGTERM set the event so the service can shut down gracefully."""

    async def runner() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            return await make(stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    return asyncio.run(runner())
