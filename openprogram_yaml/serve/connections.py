"""What aiohttp leaves to us at the connection: a cap on connections, and deadlines for a
request to start and for its headers to arrive.

aiohttp bounds the size of a request line and of headers, and a body's size
(``client_max_size``), and its handlers read the body under whatever deadline they like
(the app's ``body`` middleware reads it under ``ServeLimits.body_timeout_s``). It has no
deadline for the headers: its ``keepalive_timeout`` closes a connection that stays idle, but
it counts from the last reply on aiohttp's own clock and closes without a word. So each
connection is aiohttp's ``RequestHandler`` seen through ``GuardedConnection``, a thin
``asyncio.Protocol`` that passes every call through and keeps one timer beside it:

1. a request must start (its first byte) within ``header_timeout_s`` of the connection
   opening or of the previous reply, else the connection closes quietly (nothing was asked);
2. its headers must then arrive within ``header_timeout_s`` again, else 408 and close. The
   app's outermost middleware says when they have (``GuardedConnection.request_started``).

A reply refusing a body left unread (408, 413) is the connection's last: the app then
half-closes it (``GuardedConnection.half_close``), and what still comes is no request.

The timer is armed and cancelled as the connection goes from one of these waits to the
next: no task per connection, nothing woken per request (a watch task with an event for
each step cost 13 us a request, 4% of a served run's CPU).

Past ``max_connections`` a connection gets a 503 and is closed once the client has read it.
Those two replies are written here as bytes, the only HTTP this package writes by hand: no
request exists yet for aiohttp to answer.

The timers are set by ``call_later`` (the event loop's): tests pass their own to decide when
a deadline passes, so no test waits for a real clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from .guard import ServeLimits

__all__ = [
    "CallLater",
    "Cancellable",
    "ConnectionGuard",
    "Deadline",
    "GuardedConnection",
    "half_close",
]

#: Opens a deadline of so many seconds: ``asyncio.timeout``, or a test's own.
Deadline = Callable[[float], AbstractAsyncContextManager[object]]


class Cancellable(Protocol):
    """A timer set by ``CallLater`` (``asyncio.TimerHandle``)."""

    def cancel(self) -> None: ...


#: Calls back once so many seconds have passed (``call_later``), or a test's own.
CallLater = Callable[[float, Callable[[], None]], Cancellable]


def call_later(seconds: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
    """``callback`` called by the running event loop once ``seconds`` have passed."""
    return asyncio.get_running_loop().call_later(seconds, callback)


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


def half_close(transport: asyncio.BaseTransport) -> None:
    """End what the server sends on ``transport`` (the client reads the reply to its end)
    and keep reading what still comes, which aiohttp drops (its lingering close, up to
    10 s) before it closes the connection. Closed at once with a request's body arriving
    unread, the connection would be reset (RST), and a client still sending the body lose
    the reply it had not read yet."""
    if transport.is_closing():
        return
    if isinstance(transport, asyncio.WriteTransport) and transport.can_write_eof():
        transport.write_eof()
    else:
        transport.close()


class ConnectionGuard:
    """Counts the open connections and makes each one a ``GuardedConnection``."""

    def __init__(self, server: web.Server, limits: ServeLimits, call_later: CallLater) -> None:
        self._server = server
        self.limits = limits
        self.call_later = call_later
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
    """aiohttp's ``RequestHandler`` for one connection, with the deadlines the module
    describes: waiting for a request to start (the timer closes the connection), for its
    headers (the timer answers 408), or for its handler (no timer)."""

    def __init__(self, guard: ConnectionGuard, inner: RequestHandler) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        #: The deadline of the wait the connection is in; None while a handler runs.
        self._timer: Cancellable | None = None
        #: In a request (between its first byte and its handler's return).
        self.busy = False
        self._turned_away = False
        #: Its last reply sent (``half_close``): what still comes is no request.
        self._replied = False

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
        self._wait(self.close)  # for a request: closed quietly when none starts

    def data_received(self, data: bytes) -> None:
        if self._turned_away:
            return  # read and dropped, so that closing does not reset the connection
        if data and not self.busy and not self._replied:
            self.busy = True  # a request started: its headers are waited for
            self._wait(self._headers_late)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._turned_away:
            self._wait(None)
            self.close()
            return None
        self._inner.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        guard = self._guard
        self._wait(None)
        if self._turned_away:
            guard.turned_away.discard(self)
        else:
            guard.open.pop(self._inner, None)
            self._inner.connection_lost(exc)

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
        self._wait(None)

    def request_ended(self) -> None:
        """The app answered it: the next request must start in time. (A pipelined one
        that has already arrived starts at once, and stops the wait.)"""
        self.busy = False
        self._wait(self.close)

    def half_close(self) -> None:
        """The app sent its last reply on this connection, with the request's body unread:
        ``half_close`` it. The rest of the body is then no request, and closing waits for
        the client's end or the idle deadline (``request_ended``)."""
        self._replied = True
        if self._transport is not None:
            half_close(self._transport)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # --- the deadlines ----------------------------------------------------------------------

    def _wait(self, expired: Callable[[], None] | None) -> None:
        """Stop the deadline running; with ``expired``, start the next one, which calls it
        when it passes."""
        if self._timer is not None:
            self._timer.cancel()
        guard = self._guard
        self._timer = (
            None if expired is None else guard.call_later(guard.limits.header_timeout_s, expired)
        )

    def _headers_late(self) -> None:
        self._timer = None
        late = (
            f"the request headers did not arrive within {self._guard.limits.header_timeout_s:g} s"
        )
        self._refuse(408, "Request Timeout", late)

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
        # could lose the 503 before reading it: closed at its end, or at the header deadline.
        self._wait(self.close)
