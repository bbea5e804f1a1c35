"""A TCP proxy in front of the broker that a test can cut, restore, or partition per client process.

* :meth:`TcpProxy.cut` / :meth:`TcpProxy.restore`: the broker "disappears" for every client (the
  listener closes and every connection is reset), which is what clients see of a broker restart.
* :meth:`TcpProxy.partition` / :meth:`TcpProxy.heal`: a network partition between the given client
  processes (or, with ``isolate=True``, every client) and the broker. Their connections stay open but nothing is forwarded either way
  (requests and responses wait in the socket buffers, as packets would be dropped and
  retransmitted), and their new connections are accepted but go nowhere. Healing resumes
  forwarding, so whatever the clients still want delivered arrives late, as after a real partition.
  Every other client keeps working. A connection is told apart by the process owning its client
  socket (psutil), so no client needs to be configured differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Iterable, Optional

import psutil


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Connection:
    client: asyncio.StreamWriter
    upstream: Optional[asyncio.StreamWriter] = None
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # set: forwarding; clear: partitioned

    @property
    def client_port(self) -> int:
        peer = self.client.get_extra_info("peername")
        return int(peer[1]) if peer else -1


class TcpProxy:
    def __init__(self, listen_port: int, target_host: str, target_port: int) -> None:
        self.listen_port = listen_port
        self.target = (target_host, target_port)
        self._server: Optional[asyncio.base_events.Server] = None
        self._connections: set[_Connection] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._partitioned: set[int] = set()  # pids cut off from the broker
        self._isolated = False  # every client cut off (the broker behind this proxy is isolated)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port, reuse_address=True)

    async def cut(self) -> None:
        """Stop listening and drop every open connection (clients see the broker vanish)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for conn in list(self._connections):
            self._abort(conn)
        self._connections.clear()

    async def restore(self) -> None:
        await self.start()

    async def stop(self) -> None:
        await self.cut()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    # ---------------------------------------------------------------- partition

    def partition(self, pids: Iterable[int], *, isolate: bool = False) -> int:
        """Cut the processes ``pids`` (and their children), or every client with ``isolate``, off the broker;
        whatever was cut before and is not named now forwards again. Returns the connections frozen."""
        self._partitioned, self._isolated = set(pids), isolate
        ports = self._client_ports() if self._partitioned and not isolate else set()
        frozen = 0
        for conn in self._connections:
            if isolate or conn.client_port in ports:
                conn.gate.clear()
                frozen += 1
            else:
                conn.gate.set()
        return frozen

    def heal(self) -> None:
        """Forward everything again, including what waited during the partition."""
        self.partition(())

    def _client_ports(self) -> set[int]:
        """Local ports of the partitioned processes' sockets connected to this proxy."""
        ports: set[int] = set()
        for pid in self._partitioned:
            try:
                root = psutil.Process(pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for proc in procs:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    for c in proc.net_connections(kind="tcp"):
                        if c.raddr and c.raddr.port == self.listen_port:
                            ports.add(c.laddr.port)
        return ports

    # ---------------------------------------------------------------- forwarding

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._handle(client_reader, client_writer)
        except asyncio.CancelledError:
            pass  # the proxy stops: a clean end, not an error for the event loop to report
        finally:
            self._handlers.discard(task)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        conn = _Connection(client_writer)
        if not self._isolated and (not self._partitioned or conn.client_port not in self._client_ports()):
            conn.gate.set()
        self._connections.add(conn)
        try:
            await conn.gate.wait()  # a partitioned client's new connection goes nowhere until healed
            try:
                upstream_reader, conn.upstream = await asyncio.open_connection(*self.target)
            except OSError:
                return
            await asyncio.gather(
                self._pipe(client_reader, conn.upstream, conn.gate),
                self._pipe(upstream_reader, client_writer, conn.gate),
                return_exceptions=True,
            )
        finally:
            self._connections.discard(conn)
            self._abort(conn)

    @staticmethod
    def _abort(conn: _Connection) -> None:
        for writer in (conn.client, conn.upstream):
            if writer is not None:
                writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                await gate.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await gate.wait()
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
