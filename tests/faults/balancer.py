"""A small TCP balancer: several replicas of a service behind one address, as a load balancer puts them.

Why a test needs one: "a client retry goes to another replica" is only true if the client keeps
one address and something in front of the replicas stops sending it to a dead one. This does what
a plain L4 balancer does and nothing more: each new client connection goes to the next backend in
round-robin order, a backend whose connect fails is skipped (the client never sees it), and bytes
are piped both ways until either side closes. An established connection is never moved: when its
backend dies the client's connection is closed, and the client's retry opens a new one.

It also keeps what a test needs to prove a failover happened: per backend, the connections it got
(with the times they were opened), the connects that failed, and the requests in flight (a
connection whose client sent bytes the backend has not started answering yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence


@dataclass
class BackendStats:
    address: tuple[str, int]
    opened_at: list[float] = field(default_factory=list)  # time.monotonic() of every connection it got
    failed_connects: int = 0
    open: int = 0
    in_flight: int = 0  # connections waiting for this backend's answer to bytes the client sent

    def connections_after(self, moment: float) -> int:
        return sum(1 for t in self.opened_at if t >= moment)


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Link:
    backend: BackendStats
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    waiting: bool = False  # the client sent bytes the backend has not answered yet


class Balancer:
    def __init__(self, backends: Sequence[tuple[str, int]], host: str = "127.0.0.1", port: int = 0,
                 connect_timeout: float = 2.0) -> None:  # fmt: skip
        if not backends:
            raise ValueError("a balancer needs at least one backend")
        self.backends = [BackendStats(address=(h, p)) for h, p in backends]
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.refused = 0  # client connections closed because no backend accepted them
        self._next = 0
        self._server: Optional[asyncio.base_events.Server] = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> "Balancer":
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        for link in list(self._links):
            link.client.transport.abort()
            link.upstream.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> "Balancer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _connect(self) -> Optional[tuple[BackendStats, asyncio.StreamReader, asyncio.StreamWriter]]:
        """The next backend in turn that accepts a connection; None when none does."""
        for _ in range(len(self.backends)):
            backend = self.backends[self._next % len(self.backends)]
            self._next += 1
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(*backend.address), self.connect_timeout)
            except (OSError, asyncio.TimeoutError):
                backend.failed_connects += 1
                continue
            backend.opened_at.append(time.monotonic())
            return backend, reader, writer
        return None

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            connected = await self._connect()
            if connected is None:
                self.refused += 1
                client_writer.transport.abort()
                return
            backend, up_reader, up_writer = connected
            link = _Link(backend, client_writer, up_writer)
            self._links.add(link)
            backend.open += 1
            try:
                await asyncio.gather(self._pipe(link, client_reader, up_writer, upward=True),
                                     self._pipe(link, up_reader, client_writer, upward=False))  # fmt: skip
            finally:
                self._waiting(link, False)
                backend.open -= 1
                self._links.discard(link)
                client_writer.close()
                up_writer.close()
        finally:
            self._tasks.discard(task)

    def _waiting(self, link: _Link, waiting: bool) -> None:
        if link.waiting != waiting:
            link.waiting = waiting
            link.backend.in_flight += 1 if waiting else -1

    async def _pipe(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    upward: bool) -> None:  # fmt: skip
        """Copy one direction until EOF; a backend that vanishes closes the client's side at once
        (its in-flight request then fails, as it would behind a real balancer)."""
        try:
            while data := await reader.read(65536):
                self._waiting(link, upward)  # client bytes: a request; backend bytes: its answer started
                writer.write(data)
                await writer.drain()
            if upward and writer.can_write_eof():
                writer.write_eof()  # the client finished sending; its answer may still come
                return
        except (OSError, asyncio.IncompleteReadError):
            link.client.transport.abort()
            link.upstream.transport.abort()
            return
        # the backend closed (or died): the client gets what was already sent, then the end of the stream
        link.client.close()
        link.upstream.close()
