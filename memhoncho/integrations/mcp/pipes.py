"""stdin and stdout of ``memhoncho mcp`` as the event loop's own pipes, with no thread hops.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: every line read, every
write and every flush is a trip to a worker thread and back, three per request, about as much
as the save's own fsync on a quiet machine. Here the same lines go through asyncio's pipe
transports, and the SDK's ``stdio_server`` is handed them (its explicit-streams form). As the
SDK does, fd 0 then reads the null device and fd 1 writes to stderr, so a stray print or a
child process never lands in the protocol. Where the loop cannot watch the descriptors (a
regular file as stdin, Windows' loop), ``lean_stdio`` yields None and the SDK's own path serves.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

MAX_LINE_BYTES = 256 * 1024 * 1024  # one JSON-RPC message; larger turns are refused later


class _Lines:
    """The client's messages, one line each (the SDK's ``async for line in stdin``)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Out:
    """The server's messages (the SDK's ``await stdout.write(...)`` then ``flush()``)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


@asynccontextmanager
async def lean_stdio(wanted: bool = True) -> AsyncIterator[tuple[Any, Any] | None]:
    """``(stdin, stdout)`` for ``stdio_server(stdin, stdout)``, or None: use the SDK's own
    (also when not ``wanted``: ``memhoncho mcp --stdio-pipes sdk``)."""
    if not wanted or sys.platform == "win32":
        yield None
        return
    import fcntl

    loop = asyncio.get_running_loop()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    try:
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
        )
    except (ValueError, OSError, NotImplementedError):  # not a pipe, socket or terminal
        for fd in (wire_in, wire_out):
            try:
                os.close(fd)
            except OSError:
                pass  # a transport took it and closed it
        yield None
        return
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the wire is ours now: nothing else reads it ...
    os.close(devnull)
    os.dup2(2, 1)  # ... or writes to it
    try:
        yield _Lines(reader), _Out(writer)
    finally:
        transport.close()
