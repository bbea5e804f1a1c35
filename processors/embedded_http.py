"""Serve an ASGI app (FastAPI) with uvicorn inside an event loop this process already runs.

The processors service runs its apps on one asyncio loop and handles SIGINT/SIGTERM itself
(graceful drain of the sinks). ``uvicorn.Server.serve`` would take those signals over while it
runs; this wrapper leaves signal handling to the host and binds the socket itself, so port 0 picks
a free port that :attr:`EmbeddedHttpServer.port` then reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from typing import Any, Iterator, Optional

import uvicorn

logger = logging.getLogger(__name__)


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host:port`` (port 0: a free one, read back from the socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it an answer written in two pieces (headers, body)
    # waits for the client's delayed ACK, 40 ms per request on Linux.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _HostedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the host process owns SIGINT/SIGTERM


class EmbeddedHttpServer:
    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "http") -> None:
        self.app = app
        self.host = host
        self.requested_port = port
        self.name = name
        self.port: Optional[int] = None
        self._server: Optional[_HostedServer] = None
        self._task: Optional[asyncio.Task[None]] = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> "EmbeddedHttpServer":
        sock = bound_socket(self.host, self.requested_port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5)
        self._server = _HostedServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=f"{self.name}-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError(f"{self.name} server stopped during start-up")
            await asyncio.sleep(0.01)
        return self

    async def wait_closed(self) -> None:
        """Return once the server task ended (after :meth:`stop`, or a failure)."""
        if self._task is not None:
            await asyncio.gather(asyncio.shield(self._task), return_exceptions=True)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
        except asyncio.TimeoutError:
            logger.warning("%s server did not stop within 10s; cancelling", self.name)
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._server = None
        self._task = None


class ThreadedHttpServer:
    """An :class:`EmbeddedHttpServer` on its own event loop in a thread of this process.

    For a server whose answers must not wait for the host loop's work: the SQL door runs inside the
    sinks' process, whose loop spends tens of milliseconds at a time decoding and writing batches; on
    its own loop a read waits for the GIL (released every few ms, and by chdb while it queries),
    not for the sinks' next idle moment. Same interface as :class:`EmbeddedHttpServer`.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "http") -> None:
        self.name = name
        self._inner = EmbeddedHttpServer(app, host, port, name=name)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> Optional[int]:
        return self._inner.port

    @property
    def url(self) -> str:
        return self._inner.url

    async def start(self) -> "ThreadedHttpServer":
        started: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        host_loop = asyncio.get_running_loop()

        def report(error: Optional[BaseException]) -> None:
            if not started.done():
                started.set_exception(error) if error is not None else started.set_result(None)

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._inner.start())
            except BaseException as exc:  # noqa: BLE001 - handed to the starter, which raises it
                host_loop.call_soon_threadsafe(report, exc)
                loop.close()
                return
            host_loop.call_soon_threadsafe(report, None)
            try:
                loop.run_until_complete(self._inner.wait_closed())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"{self.name}-loop", daemon=True)
        self._thread.start()
        await started
        return self

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._inner.stop(), loop)
        await asyncio.wrap_future(future)
        await asyncio.to_thread(thread.join, 15)
        self._loop = None
        self._thread = None
