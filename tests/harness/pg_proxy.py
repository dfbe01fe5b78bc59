"""A TCP relay in front of a real PostgreSQL that can cut every connection and, while
`garbled`, answer new ones as no PostgreSQL would: a bare ReadyForQuery instead of the
start-up exchange (a server shutting down, or a middlebox, answering out of turn). asyncpg
fails such a connection with an error of its own that is neither a connection nor a
database error (an AttributeError in asyncpg 0.30)."""

from __future__ import annotations

import asyncio
import contextlib
import struct

READY_FOR_QUERY = b"Z" + struct.pack("!i", 5) + b"I"
SSL_REQUEST = struct.pack("!ii", 8, 80877103)


class PgRelay:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.garbled = False
        self.garbled_answers = 0  # connections answered out of turn so far
        self.answered = asyncio.Event()  # set at each such answer
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        """Close every relayed connection at once, both ways."""
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.garbled:
            self._open.add(writer)
            first = await reader.read(1024)
            if first == SSL_REQUEST:  # "no SSL here", then the start-up message
                writer.write(b"N")
                await reader.read(1024)
            writer.write(READY_FOR_QUERY)
            self.garbled_answers += 1
            self.answered.set()
            await writer.drain()
            with contextlib.suppress(OSError):
                await reader.read()  # until the client gives up (or a cut)
            self._open.discard(writer)
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._open.update((writer, up_writer))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.transport.abort()
