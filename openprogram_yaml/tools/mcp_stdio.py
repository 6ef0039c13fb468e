"""The stdio transport of ``mcp`` tools, reading the server's stdout with bounds.

Imported when an ``mcp: {command: …}`` server first starts. The SDK's own stdio transport
joins the server's output until a newline with no limit, each chunk copying all before it: a
server writing one 50 MB line held the runner 33 s and 310 MB, and one writing without end
held its memory until the process died. It also drops a message it cannot parse and leaves
the call waiting for its timeout: a result holding a lone surrogate (``"\\udcff"``, what
Python's ``json.dumps`` writes for a file name that is not UTF-8) or a byte that is not
UTF-8 made the call fail after ``timeout_s`` as "did not answer".

Here each message (one line) is kept in pieces joined once, up to ``MAX_MESSAGE_BYTES``;
a longer one ends the connection, its reason given to ``on_fault`` (the call it answered
fails at once, saying why). A line the SDK's parser refuses is read again by Python's,
with lone surrogates and bytes that are not UTF-8 made U+FFFD (``unicode_value``); only a
line neither can read is dropped, as the SDK does (a server printing a log line to stdout
keeps working). Starting and stopping are the SDK's: the program in its own process
group (never a shell), the environment the SDK passes, and on exit stdin closed, then
SIGTERM and SIGKILL of the group.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import anyio
import mcp_types
from anyio.abc import Process
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from openprogram_yaml.tools.base import unicode_value

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp.client._transport import TransportStreams

__all__ = ["MAX_MESSAGE_BYTES", "stdio_transport"]

#: The most one message (one line of stdout) of an MCP server may hold: as over HTTP
#: (``mcp_http.MAX_HTTP_REPLY_BYTES``), a 20 MiB file as base64, with room.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Seconds the server has to exit once its stdin is closed, then after SIGTERM (the SDK's).
EXIT_WAIT_S = 2.0
_POLL_S = 0.01


def parse_message(line: bytes) -> SessionMessage | Exception:
    """One line of the server's stdout as a message, or the error saying why it is none."""
    adapter = mcp_types.jsonrpc_message_adapter
    try:
        return SessionMessage(adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        refused = exc
    try:  # Python's reader takes lone surrogates; bytes not UTF-8 become U+FFFD
        value = unicode_value(json.loads(line.decode("utf-8", "replace")))
        return SessionMessage(adapter.validate_python(value, by_name=False))
    except (ValueError, RecursionError):
        return refused


async def _exited(process: Process, within_s: float) -> bool:
    """Whether the process has exited within ``within_s`` (polled: ``wait()`` also waits
    for the pipes, which a grandchild may hold open)."""
    with anyio.move_on_after(within_s):
        while process.returncode is None:
            await anyio.sleep(_POLL_S)
    return process.returncode is not None


async def _stop(process: Process) -> None:
    """Close its stdin, give it ``EXIT_WAIT_S`` to exit, then end its process group."""
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdin is not None:
            await process.stdin.aclose()
    if not await _exited(process, EXIT_WAIT_S):
        await terminate_posix_process_tree(process, EXIT_WAIT_S)
        await _exited(process, EXIT_WAIT_S)
    # Its pipes closed and its exit collected: a grandchild still holding a pipe open
    # cannot hold this up past ``EXIT_WAIT_S``.
    with anyio.move_on_after(EXIT_WAIT_S), contextlib.suppress(OSError):
        await process.aclose()


async def _read(
    process: Process,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    on_fault: Callable[[str], None],
) -> None:
    """Pass each line of stdout to ``sink`` as a message; past the cap, end the connection.
    Once ``sink`` is closed (the session ended), stdout is still read to its end and
    dropped: a server blocked writing to a full pipe could not exit."""
    assert process.stdout is not None
    pieces: list[bytes] = []  # the start of a line no newline has ended yet
    size = 0
    open_sink = True
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
        async with sink:
            while True:
                chunk = await process.stdout.receive()
                if not open_sink:
                    continue
                *lines, rest = chunk.split(b"\n")
                for line in lines:
                    if pieces:
                        line = b"".join([*pieces, line])
                        pieces.clear()
                        size = 0
                    if len(line) > MAX_MESSAGE_BYTES:
                        break
                    try:
                        await sink.send(parse_message(line))
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        open_sink = False
                        break
                else:
                    if rest:
                        pieces.append(rest)
                        size += len(rest)
                    if size <= MAX_MESSAGE_BYTES:
                        continue
                if open_sink:  # a line past the cap, ended or not
                    on_fault(f"it sent a message larger than {MAX_MESSAGE_BYTES:,} bytes")
                    return  # leaving closes the sink: the session sees the connection end


async def _write(
    process: Process,
    source: AsyncIterator[SessionMessage],
    sink: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """Send each message to the server's stdin, one JSON line each."""
    assert process.stdin is not None
    try:
        async for message in source:
            text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            await process.stdin.send(text.encode("utf-8", "replace") + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: the session sees the connection end, not a call
        # waiting for its timeout.
        await sink.aclose()


@contextlib.asynccontextmanager
async def stdio_transport(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    errlog: TextIO,
    on_fault: Callable[[str], None],
) -> AsyncIterator[TransportStreams]:
    """The server ``command`` started (its stderr to ``errlog``), as the SDK's streams.
    ``on_fault`` hears why the transport ended the connection, when it did."""
    process = await anyio.open_process(
        list(command),
        env={**get_default_environment(), **env},
        stderr=errlog,
        cwd=cwd,
        start_new_session=True,  # its own group, so stopping it stops what it started
    )
    incoming, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read, process, incoming, on_fault)
            tasks.start_soon(_write, process, outgoing, incoming)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    read_stream.close()
                    write_stream.close()
                    await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        for stream in (read_stream, write_stream, incoming, outgoing):
            stream.close()
