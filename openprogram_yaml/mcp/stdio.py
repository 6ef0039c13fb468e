"""stdin for the stdio transport, read by the event loop so that a stop can interrupt it.

The SDK's ``stdio_server`` reads stdin with a blocking ``readline`` in a worker thread, which
no cancellation can interrupt: on Ctrl-C or SIGTERM with the client's pipe still open the
process would hang until the client wrote another line. ``protocol_stdin`` takes fd 0 the
way the SDK does (a private duplicate serves the protocol; fd 0 then reads the null device,
so a tool or child process cannot swallow protocol bytes) and reads the duplicate through an
asyncio pipe transport instead. stdout is left to the SDK, which points fd 1 at stderr.

stdin that is not a pipe, socket or terminal (a regular file) cannot be read by the event
loop; the SDK's own reader is used then (None).

``StdinMessages`` reads the lines and parses each once (into the messages the server reads;
the SDK's transport is given no lines of its own to read, only stdout to write). A line
that is no JSON-RPC message (not JSON, a string holding half of a UTF-16 pair, a number
past the SDK's range, nesting past its limit) was dropped by the SDK's transport without a
word, and the client's request waited for ever: it is answered here, as JSON-RPC asks
(``-32700`` Parse error, ``-32600`` Invalid Request, with the request's ``id`` when it can
be found, else ``null``). A line past ``MAX_LINE`` is answered so too, and skipped to its
end. A client's response that cannot be read (to an elicitation) is no request to
answer: the server is given an error response with its id instead, so the request it
answers fails at once (the run's question is then declined) instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = [
    "NO_LINES",
    "StdinMessages",
    "UnreadableLine",
    "parse_line",
    "protocol_stdin",
    "response_in_place_of",
]

#: The longest protocol message accepted (asyncio's default of 64 KiB is too small for a
#: tool call carrying a document).
MAX_LINE = 64 << 20


class _NoLines:
    """stdin for the SDK's transport when ``StdinMessages`` reads it: no lines at all."""

    def __aiter__(self) -> _NoLines:
        return self

    async def __anext__(self) -> str:
        raise StopAsyncIteration


#: Given to the SDK's ``stdio_server`` as its stdin: it then serves stdout alone.
NO_LINES = _NoLines()


#: Where a line that is no message is answered (the transport's write stream), once known.
Refuse = Callable[[types.JSONRPCError], Awaitable[None]]


class UnreadableLine(ValueError):
    """A line that is no JSON-RPC message; ``refusal`` answers it."""

    def __init__(self, refusal: types.JSONRPCError) -> None:
        super().__init__(refusal.error.message)
        self.refusal = refusal


class StdinMessages:
    """The protocol's messages from stdin, each line parsed once, as the server reads them.
    A line that is none is answered with ``refuse`` and skipped (blank lines are skipped)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        #: Answers a line that is no message (set once the write stream is open).
        self.refuse: Refuse | None = None
        #: The start of a line past ``MAX_LINE`` (where its ``id`` is looked for).
        self._head = b""

    def __aiter__(self) -> StdinMessages:
        return self

    def end(self) -> None:
        """End the messages now, as the client closing stdin would (a stop by signal)."""
        self._reader.feed_eof()

    async def pass_on(self, messages: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        """Send each message to ``messages`` (the server's read stream), which is closed at
        the end of stdin; ends early when the server has stopped reading."""
        async with messages:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async for message in self:
                    await messages.send(SessionMessage(message))

    async def __anext__(self) -> types.JSONRPCMessage:
        while True:
            line = await self._line()
            if line is None:
                head, self._head = self._head, b""
                await self._refuse(_too_long(head))
                continue
            if not line:
                raise StopAsyncIteration
            text = line.decode("utf-8", "replace")
            if not text.strip():
                continue
            try:
                return parse_line(text)
            except UnreadableLine as exc:
                instead = response_in_place_of(text, exc.refusal)
                if instead is not None:
                    return instead
                await self._refuse(exc.refusal)

    async def _refuse(self, refusal: types.JSONRPCError) -> None:
        if self.refuse is not None:
            await self.refuse(refusal)

    async def _line(self) -> bytes | None:
        """The next line (b"" at the end); None for one past ``MAX_LINE``, which is read
        to its end and dropped, its first ``MAX_LINE`` bytes kept in ``_head`` (a line too
        long made ``readline`` raise, which ended the server with a traceback)."""
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the end, without a line break
            return exc.partial
        except asyncio.LimitOverrunError as exc:
            self._head = await self._reader.read(exc.consumed)
        while True:  # the rest of the line, dropped
            try:
                await self._reader.readuntil(b"\n")
                return None
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as exc:
                await self._reader.read(exc.consumed)


def parse_line(line: str) -> types.JSONRPCMessage:
    """The JSON-RPC message ``line`` holds, parsed as the SDK's transport parses it; else
    ``UnreadableLine`` with the error answering it. Its ``id`` is the request's: a line
    without a top-level ``method`` is no request, and is answered with ``id: null`` (the
    id of a response is one of this server's requests, which the client must not take
    for one of its own)."""
    try:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        if errors and errors[0]["type"] == "json_invalid":
            code, message = types.PARSE_ERROR, f"Parse error: {errors[0]['msg']}"
        else:
            code, message = types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"
        error = types.ErrorData(code=code, message=message)
        found = _top_level(line)
        refusal_id = found.id if found.method else None
        raise UnreadableLine(
            types.JSONRPCError(jsonrpc="2.0", id=refusal_id, error=error)
        ) from None


def response_in_place_of(line: str, refusal: types.JSONRPCError) -> types.JSONRPCError | None:
    """For a client's unreadable response to a request of this server (an elicitation):
    an error response with its id, for the server to read instead, so the request it
    answers fails at once instead of waiting for ever. None for any other line."""
    found = _top_level(line)
    if found.method or found.id is None or not found.answer:
        return None
    error = types.ErrorData(
        code=types.INVALID_REQUEST,
        message=f"the client's response could not be read ({refusal.error.message})",
    )
    return types.JSONRPCError(jsonrpc="2.0", id=found.id, error=error)


def _too_long(head: bytes) -> types.JSONRPCError:
    """The error answering a line past ``MAX_LINE`` that begins with ``head``."""
    message = f"Invalid Request: the message is longer than {MAX_LINE >> 20} MiB, the most read"
    error = types.ErrorData(code=types.INVALID_REQUEST, message=message)
    found = _top_level(head.decode("utf-8", "replace"))
    return types.JSONRPCError(jsonrpc="2.0", id=found.id if found.method else None, error=error)


#: A JSON string (possessive: linear on any text), or a bracket.
_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]', re.DOTALL)
#: After the key ``"id"``: its value, a number or a string.
_ID_VALUE = re.compile(r'\s*:\s*(-?[0-9]{1,18}(?![0-9.eE])|"(?:[^"\\]++|\\.)*+")')
#: After a string: it is a key.
_COLON = re.compile(r"\s*:")


@dataclass(frozen=True, slots=True)
class _TopLevel:
    """What a message's top-level keys say of it."""

    #: Its ``id`` (a number or a string), or None.
    id: int | str | None = None
    #: Whether it has a ``method``: a request (or a notification).
    method: bool = False
    #: Whether it has a ``result`` or an ``error``: a response.
    answer: bool = False


#: How much of a line is scanned for its top-level keys: clients write ``id`` and
#: ``method`` (or ``result``) before ``params``, and a line of 64 MiB of short strings took
#: 4 s to scan whole, the event loop waiting.
_SCANNED = 1 << 20


def _top_level(line: str) -> _TopLevel:
    """The top-level keys of the message ``line`` that say what it is, found by scanning
    its first ``_SCANNED`` characters, not parsing: the line may be no JSON, or nest past
    any parser's limit."""
    depth = 0
    request_id: int | str | None = None
    method = answer = False
    for token in _TOKEN.finditer(line, 0, _SCANNED):
        if request_id is not None and (method or answer):
            break
        text = token.group()
        if text in "[{":
            depth += 1
        elif text in "]}":
            depth -= 1
        elif depth == 1 and _COLON.match(line, token.end()):
            if text == '"method"':
                method = True
            elif text in ('"result"', '"error"'):
                answer = True
            elif text == '"id"' and request_id is None:
                value = _ID_VALUE.match(line, token.end())
                if value is not None:
                    with contextlib.suppress(ValueError):
                        found: object = json.loads(value.group(1))
                        if isinstance(found, int | str):
                            request_id = found
    return _TopLevel(request_id, method, answer)


@contextlib.asynccontextmanager
async def protocol_stdin() -> AsyncIterator[StdinMessages | None]:
    """stdin as cancellable messages while the protocol is served; fd 0 restored after."""
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
        yield StdinMessages(reader)
    finally:
        transport.close()  # closes the private duplicate
        os.dup2(saved, 0)
        os.close(saved)
