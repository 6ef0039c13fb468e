"""What aiohttp leaves to us at the connection: a cap on connections, and deadlines for a
request to start and for its headers to arrive.

aiohttp bounds the size of a request line and of headers, and a body's size
(``client_max_size``), and its handlers read the body under whatever deadline they like
(the app's ``body`` middleware reads it under ``ServeLimits.body_timeout_s``). It has no
deadline for the headers: its ``keepalive_timeout`` closes a connection that stays idle, but
it counts from the last reply on aiohttp's own clock and closes without a word. So each
connection is aiohttp's ``RequestHandler`` seen through ``GuardedConnection``, a thin
``asyncio.Protocol`` that passes every call through and keeps a watch beside it:

1. a request must start (its first byte) within ``header_timeout_s`` of the connection
   opening or of the previous reply, else the connection closes quietly (nothing was asked);
2. its headers must then arrive within ``header_timeout_s`` again, else 408 and close. The
   app's outermost middleware says when they have (``ConnectionGuard.request_started``).

Past ``max_connections`` a connection gets a 503 and is closed once the client has read it.
Those two replies are written here as bytes, the only HTTP this package writes by hand: no
request exists yet for aiohttp to answer.

The deadlines are opened by ``deadline`` (``asyncio.timeout``): tests pass their own to decide
when a deadline passes, so no test waits for a real clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from .guard import ServeLimits

__all__ = ["ConnectionGuard", "Deadline", "GuardedConnection"]

#: Opens a deadline of so many seconds: ``asyncio.timeout``, or a test's own.
Deadline = Callable[[float], AbstractAsyncContextManager[object]]


def _canned(status: int, reason: str, error: str) -> bytes:
    """A whole JSON reply that closes the connection."""
    body = json.dumps({"error": error}).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class ConnectionGuard:
    """Counts the open connections and makes each one a ``GuardedConnection``."""

    def __init__(self, server: web.Server, limits: ServeLimits, deadline: Deadline) -> None:
        self._server = server
        self.limits = limits
        self.deadline = deadline
        #: Connections being served, by the aiohttp handler each wraps.
        self.open: dict[RequestHandler, GuardedConnection] = {}
        #: Connections past the cap, being told so.
        self.turned_away: set[GuardedConnection] = set()

    def __call__(self) -> GuardedConnection:
        """The protocol factory for ``loop.create_server``."""
        return GuardedConnection(self, self._server())

    def of(self, request: web.BaseRequest) -> GuardedConnection | None:
        """The connection ``request`` came on (None once it is gone)."""
        return self.open.get(request.protocol)

    def close_idle(self) -> None:
        """Close every connection waiting for a request (shutdown): busy ones finish theirs."""
        for connection in list(self.open.values()):
            if not connection.busy:
                connection.close()


class GuardedConnection(asyncio.Protocol):
    """aiohttp's ``RequestHandler`` for one connection, with the watch the module describes."""

    def __init__(self, guard: ConnectionGuard, inner: RequestHandler) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._watch: asyncio.Task[None] | None = None
        self._data = asyncio.Event()  # a byte of the next request arrived
        self._head = asyncio.Event()  # its headers were parsed (the handler started)
        self._done = asyncio.Event()  # its handler returned
        #: In a request (between its first byte and its handler's return).
        self.busy = False
        self._turned_away = False

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        guard = self._guard
        limit = guard.limits.max_connections
        if len(guard.open) >= limit:
            self._turn_away(limit)
            return
        guard.open[self._inner] = self
        self._inner.connection_made(transport)
        self._watch = asyncio.get_running_loop().create_task(self._keep_watch())

    def data_received(self, data: bytes) -> None:
        if self._turned_away:
            return  # read and dropped, so that closing does not reset the connection
        if data:
            self._data.set()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._turned_away:
            self._done.set()
            return None  # the transport closes itself
        self._inner.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        guard = self._guard
        if self._turned_away:
            guard.turned_away.discard(self)
            self._done.set()
        else:
            guard.open.pop(self._inner, None)
            self._inner.connection_lost(exc)
        if self._watch is not None:
            self._watch.cancel()

    def pause_writing(self) -> None:
        if not self._turned_away:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if not self._turned_away:
            self._inner.resume_writing()

    # --- what the app tells it ------------------------------------------------------------

    def request_started(self) -> None:
        """The app got a request on this connection: its headers are in."""
        self.busy = True
        self._data.set()
        self._head.set()

    def request_ended(self) -> None:
        """The app answered it; the watch for the next request starts. (Reset here, not in
        the watch: a pipelined request may start before the watch runs again.)"""
        self.busy = False
        self._data.clear()
        self._head.clear()
        self._done.set()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # --- the watch --------------------------------------------------------------------------

    async def _keep_watch(self) -> None:
        limits, deadline = self._guard.limits, self._guard.deadline
        while True:
            try:
                async with deadline(limits.header_timeout_s):
                    await self._data.wait()
            except TimeoutError:
                self.close()  # idle: nothing was asked, so nothing is answered
                return
            self.busy = True
            try:
                async with deadline(limits.header_timeout_s):
                    await self._head.wait()
            except TimeoutError:
                late = f"the request headers did not arrive within {limits.header_timeout_s:g} s"
                self._refuse(408, "Request Timeout", late)
                return
            await self._done.wait()
            self._done.clear()

    def _refuse(self, status: int, reason: str, error: str) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(_canned(status, reason, error))
            transport.close()

    def _turn_away(self, limit: int) -> None:
        """Past the connection cap: answer 503 and close once the client has read it."""
        transport = self._transport
        assert transport is not None
        guard = self._guard
        if len(guard.turned_away) >= limit:
            transport.abort()  # a flood: no reply, the file descriptor back at once
            return
        self._turned_away = True
        guard.turned_away.add(self)
        error = f"the server is serving {limit} connections, its limit; try again shortly"
        transport.write(_canned(503, "Service Unavailable", error))
        if transport.can_write_eof():
            transport.write_eof()
        # Closing with the request unread would reset the connection (RST), and the client
        # could lose the 503 before reading it: wait for its end, within the header deadline.
        self._watch = asyncio.get_running_loop().create_task(self._close_when_read())

    async def _close_when_read(self) -> None:
        try:
            async with self._guard.deadline(self._guard.limits.header_timeout_s):
                await self._done.wait()
        except TimeoutError:
            pass
        self.close()
