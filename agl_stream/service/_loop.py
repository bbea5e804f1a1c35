"""The event loop and HTTP parser a service runs on: uvloop and httptools where installed (``AGL_EVENT_LOOP``,
``AGL_HTTP_PARSER``, uvicorn's ``--loop`` and ``--http`` choices).

Our services spend most of their time moving small Kafka and HTTP messages; uvloop's loop and transports
and httptools' parser are C, where asyncio's selector loop and h11 are Python (see docs/performance.md)."""

from __future__ import annotations

import asyncio
import sys
from typing import Awaitable, Callable, Optional, TypeVar

from agl_stream.config import Settings, SettingsError

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(settings: Optional[Settings] = None) -> Optional[LoopFactory]:
    """uvloop's loop where ``AGL_EVENT_LOOP`` allows it and uvloop is installed; ``None``: asyncio's."""
    choice = (settings or Settings.from_env()).event_loop
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SettingsError("AGL_EVENT_LOOP=uvloop, but uvloop is not installed (it comes with the ingest and processors extras)") from None
        return None
    return uvloop.new_event_loop


def run_on_service_loop(main: Callable[[], Awaitable[T]], settings: Optional[Settings] = None) -> T:
    """``asyncio.run(main())`` on :func:`loop_factory`'s loop (asyncio's on Python 3.10, which has no loop factory)."""
    factory = loop_factory(settings)
    if factory is None or sys.version_info < (3, 11):
        return asyncio.run(main())  # type: ignore[arg-type]
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())  # type: ignore[arg-type]


def uvicorn_choices(settings: Optional[Settings] = None) -> dict[str, str]:
    """uvicorn's ``loop`` and ``http`` options from the settings (its ``auto`` picks uvloop and httptools where installed)."""
    settings = settings or Settings.from_env()
    if settings.event_loop == "uvloop":
        loop_factory(settings)  # the same clear error as a processor's when uvloop is missing
    return {"loop": settings.event_loop, "http": settings.http_parser}
