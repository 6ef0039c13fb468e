"""stdin for the stdio transport, read by the event loop so that a stop can interrupt it.

The SDK's ``stdio_server`` reads stdin with a blocking ``readline`` in a worker thread, which
no cancellation can interrupt: on Ctrl-C or SIGTERM with the client's pipe still open the
process would hang until the client wrote another line. ``protocol_stdin`` takes fd 0 the
way the SDK does (a private duplicate serves the protocol; fd 0 then reads the null device,
so a tool or child process cannot swallow protocol bytes) and reads the duplicate through an
asyncio pipe transport instead. stdout is left to the SDK, which points fd 1 at stderr.

stdin that is not a pipe, socket or terminal (a regular file) cannot be read by the event
loop; the SDK's own reader is used then (None).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator

__all__ = ["StdinLines", "protocol_stdin"]

#: The longest protocol message accepted (asyncio's default of 64 KiB is too small for a
#: tool call carrying a document).
MAX_LINE = 64 << 20


class StdinLines:
    """The protocol's lines from stdin, as ``stdio_server`` iterates them."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> StdinLines:
        return self

    def end(self) -> None:
        """End the lines now, as the client closing stdin would (a stop by signal)."""
        self._reader.feed_eof()

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def protocol_stdin() -> AsyncIterator[StdinLines | None]:
    """stdin as cancellable lines while the protocol is served; fd 0 restored after."""
    try:
        private = os.dup(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):
        yield None
        return
    pipe = os.fdopen(private, "rb", buffering=0)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except ValueError:  # a regular file: not for the event loop
        pipe.close()
        yield None
        return
    null = os.open(os.devnull, os.O_RDONLY)
    saved = os.dup(0)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield StdinLines(reader)
    finally:
        transport.close()  # closes the private duplicate
        os.dup2(saved, 0)
        os.close(saved)
