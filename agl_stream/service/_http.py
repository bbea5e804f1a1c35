"""One way to host an ASGI app (FastAPI) with uvicorn, for every agl-stream service.

:class:`HttpHost` binds the socket itself (port 0 picks a free port, read back as :attr:`HttpHost.port`;
``TCP_NODELAY`` on every accepted connection) and serves the app in one of three places:

- on the event loop the service already runs (:meth:`HttpHost.start` / :meth:`HttpHost.stop`): the host
  process keeps SIGINT/SIGTERM (the processors drain their sinks on them);
- on an event loop of its own in a thread (``threaded=True``; :meth:`start_in_thread` /
  :meth:`stop_thread` from synchronous code): answers never wait for the host loop's work (the SQL door
  beside the sinks, the embedded inference server beside the learner);
- as the process's main job (:meth:`serve` / :meth:`run`): SIGINT/SIGTERM stop it gracefully within the
  service's :class:`~agl_stream.service.StopDeadline` (the kit's :class:`~agl_stream.service.StopSignals` rule).

:func:`serve_workers` is the same for N worker processes (uvicorn's process manager, an app factory).

uvicorn and the web framework are imported only here and only when a server starts: the SDK's base
install, which agents use, has neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from typing import Any, Iterator, Optional

from agl_stream.service._loop import run_on_service_loop, uvicorn_choices
from agl_stream.service._stop import StopDeadline, StopSignals

logger = logging.getLogger(__name__)

#: seconds a graceful stop lets in-flight requests finish before their connections are closed
DEFAULT_GRACEFUL_S = 5.0


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one; read it back with ``getsockname``).

    ``TCP_NODELAY`` is inherited by accepted connections: without it an answer written in two pieces
    (headers, body) waits for the client's delayed ACK, 40 ms per request on Linux. A taken port raises
    ``OSError`` here, before anything else of the service starts.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _uvicorn_server(app: Any, *, graceful_s: float, access_log: bool, log_level: str) -> Any:
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn would take SIGINT/SIGTERM over and re-raise them after its shutdown; here either the
            # host process owns them, or HttpHost.serve installs its own handlers (which must not re-raise:
            # the service still has its own stop to run after the server's)
            yield

    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="off",
                            timeout_graceful_shutdown=max(1, round(graceful_s)), **uvicorn_choices())  # fmt: skip
    return _Server(config)


class HttpHost:
    """An ASGI app served by uvicorn on a socket this object binds (see the module's docstring)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "http",
                 graceful_s: float = DEFAULT_GRACEFUL_S, access_log: bool = False, log_level: str = "warning",
                 sock: Optional[socket.socket] = None) -> None:  # fmt: skip
        self.app = app
        self.host = host
        self.name = name
        self.graceful_s = graceful_s
        self._sock = sock if sock is not None else bound_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _uvicorn_server(app, graceful_s=graceful_s, access_log=access_log, log_level=log_level)
        self._task: Optional[asyncio.Task[None]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return url_of(self.host, self.port)

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    # ------------------------------------------------------------ on the running loop

    async def start(self) -> "HttpHost":
        """Serve on the running loop; returns once the server accepts connections."""
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]), name=f"{self.name}-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError(f"{self.name} server stopped during start-up")
            await asyncio.sleep(0.01)
        logger.debug("%s serving on %s", self.name, self.url)
        return self

    async def wait_closed(self) -> None:
        """Return once the server ended (after :meth:`stop`, or a failure, which is logged)."""
        if self._task is not None:
            for outcome in await asyncio.gather(asyncio.shield(self._task), return_exceptions=True):
                if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                    logger.error("%s server failed: %r", self.name, outcome)

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish for ``graceful_s``, then close (bounded)."""
        if self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=self.graceful_s + 5)
        except asyncio.TimeoutError:
            logger.warning("%s server did not stop within %.0f s; cancelling", self.name, self.graceful_s + 5)
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        self._sock.close()

    # ------------------------------------------------------------ as the process's main job

    async def serve(self, deadline: Optional[StopDeadline] = None) -> None:
        """Serve until SIGINT/SIGTERM, then stop gracefully within ``deadline`` (the kit's :class:`StopSignals`
        rule: a second Ctrl-C exits at once). Returns after the stop, so the caller's own stop runs next."""
        loop = asyncio.get_running_loop()

        def stop() -> None:
            self._server.should_exit = True

        signals = StopSignals(stop, deadline or StopDeadline(self.graceful_s + 5, name=self.name))
        signals.install_on_loop(loop)
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            signals.uninstall_from_loop(loop)
            self._sock.close()

    def run(self, deadline: Optional[StopDeadline] = None) -> None:
        """:meth:`serve` on a new event loop (a CLI's whole job)."""
        run_on_service_loop(lambda: self.serve(deadline))

    # ------------------------------------------------------------ on a loop of its own, in a thread

    def start_in_thread(self, timeout: float = 30.0) -> "HttpHost":
        """Serve on a new event loop in a daemon thread; returns once it accepts connections."""
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._server.serve(sockets=[self._sock]))
            except BaseException as exc:  # noqa: BLE001 - reported to the starter below, or logged
                failure.append(exc)
                logger.error("%s server failed: %r", self.name, exc)
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name=f"{self.name}-loop", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if failure or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} server did not start") from (failure[0] if failure else None)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} server did not start within {timeout:.0f} s")
            time.sleep(0.01)
        return self

    def stop_thread(self) -> None:
        """Stop the threaded server (graceful for ``graceful_s``, then at once) and join its thread."""
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(self.graceful_s + 1)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(5)
            if self._thread.is_alive():
                logger.warning("%s server thread did not end; left as a daemon thread", self.name)
        self._thread = None
        self._sock.close()

    async def start_threaded(self) -> "HttpHost":
        """:meth:`start_in_thread` from async code (the wait for start-up does not block the loop)."""
        return await asyncio.to_thread(self.start_in_thread)

    async def stop_threaded(self) -> None:
        await asyncio.to_thread(self.stop_thread)


def serve_workers(factory: str, host: str, port: int, workers: int, *, graceful_s: float = DEFAULT_GRACEFUL_S,
                  log_level: str = "warning", access_log: bool = False) -> None:  # fmt: skip
    """Serve ``module:factory`` in ``workers`` processes (uvicorn's manager; it owns SIGINT/SIGTERM).

    Each worker builds its own app from the factory, so nothing is shared in memory between them; the
    manager restarts a worker that dies and stops them all, bounded by ``graceful_s``, on a signal.
    """
    import uvicorn

    uvicorn.run(factory, factory=True, host=host, port=port, workers=workers, log_level=log_level,
                access_log=access_log, timeout_graceful_shutdown=max(1, round(graceful_s)), **uvicorn_choices())  # fmt: skip
