"""Test helpers: an ASGI app served by a real uvicorn on a free port, and a reader of agl.spans."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Optional

import uvicorn
from fastapi import FastAPI

from agl_stream.config import Settings
from agl_stream.kafka import RecordConsumer
from agl_stream.types import Span


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServedApp:
    """Runs ``app`` under uvicorn in a thread (its lifespan included) until :meth:`stop`."""

    def __init__(self, app: FastAPI, port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    def start(self, timeout: float = 30.0) -> "ServedApp":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> "ServedApp":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def read_spans(settings: Settings, expected: int, timeout: float = 20.0, settle: float = 0.0) -> list[tuple[str, Span]]:
    """Every (key, span) on the spans topic, once ``expected`` arrived (or ``timeout`` passed).

    ``settle`` keeps reading that long after the expected count, to catch records that should
    not be there.
    """
    consumer = RecordConsumer(settings, [settings.topic("spans")], group_id=None)
    out: list[tuple[str, Span]] = []
    async with consumer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(out) < expected:
            good, bad = await consumer.get_decoded(Span, timeout=0.5)
            assert not bad, [b.error.reason for b in bad]
            out.extend((d.key or "", d.value) for d in good)
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            good, bad = await consumer.get_decoded(Span, timeout=0.2)
            assert not bad, [b.error.reason for b in bad]
            out.extend((d.key or "", d.value) for d in good)
    return out


async def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.05)
