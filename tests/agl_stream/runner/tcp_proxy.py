"""A TCP proxy in front of the broker that a test can cut and restore (a broker "disappearing")."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Optional


class TcpProxy:
    def __init__(self, listen_port: int, target_host: str, target_port: int) -> None:
        self.listen_port = listen_port
        self.target = (target_host, target_port)
        self._server: Optional[asyncio.base_events.Server] = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port, reuse_address=True)

    async def cut(self) -> None:
        """Stop listening and drop every open connection (clients see the broker vanish)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def restore(self) -> None:
        await self.start()

    async def stop(self) -> None:
        await self.cut()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.update({client_writer, upstream_writer})
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer), self._pipe(upstream_reader, client_writer), return_exceptions=True
        )
        for writer in (client_writer, upstream_writer):
            self._writers.discard(writer)
            writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
