"""``mcp`` tools: the tools of an MCP server, through the official ``mcp`` SDK (its one home).

A ``McpServer`` is one ``mcp:`` entry of an agent: a program started with an argv list (never
a shell) that talks over stdin/stdout, or a streamable HTTP endpoint. Its tools are known only
once connected, so the server starts lazily: the first run that offers the agent's tools
calls ``tools()``, which connects (once per process and event loop; concurrent runs share the
connection and wait on one start) and lists the server's tools as ``McpTool`` objects named
``<entry>__<tool>`` (``files__read_file``): a dot would be clearer, but the OpenAI and
Anthropic APIs accept only ``[A-Za-z0-9_-]`` in tool names, so any other character of the
server's name becomes ``_``.

The SDK's clients are anyio context managers, which must be entered and left by the same
task. So each connection lives in one long-lived task that owns the ``Client`` context and
waits for ``stop``; callers (the runs) talk to the server through the connected client.
``aclose()`` stops that task, and with it the server: stdin closed, then SIGTERM and SIGKILL
of its process group (the SDK's shutdown, in ``mcp_stdio``: the transport that bounds what
a stdio server's message may hold). The server's stderr goes to a pipe that a thread
reads, keeping its last bytes (a server that logs for days fills no disk): they are shown
when it fails to start.

Failures: a server that cannot start is a ``ToolError`` from ``tools()`` (the run fails and
says why); one that dies during a call, does not answer within ``timeout_s``, or answers with
``isError`` makes that call fail (the model sees the error). A server that stopped starts
again on the next run.

A replay starts no server: ``replayed_tools`` gives the tools the recorded requests offered,
and the recordings answer their calls. Nor does an offline run (the ``test`` model without
live tools, ``run.agent_runtime``): it offers the tools the agent names, by name only.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import os
import re
import shutil
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from openprogram_yaml.errors import Diagnostic, ToolError
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.redaction import redact, redact_json
from openprogram_yaml.regex_safety import Backtracking, exponential_backtracking
from openprogram_yaml.runtime.content import ToolContent, media_block
from openprogram_yaml.tools.base import ConfiguredTool, ToolBuildError, cap_text
from openprogram_yaml.tools.http import header_secrets

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client import Transport
    from mcp.types import CallToolResult, ContentBlock

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "SEPARATOR",
    "McpServer",
    "McpTool",
    "check_servers",
    "is_server_tool",
]

#: The SDK's client logs what a server sent that it could not read, with a traceback and
#: the end of the line (where a server may echo the secrets it was given), and other things
#: a server controls (an unknown event name, a content type). With no logging configured,
#: Python prints such records on stderr as they are: not shown. The failure itself reaches
#: the run as the call's ``ToolError`` (or its timeout).
_SDK_LOG = logging.getLogger("mcp.client")
_SDK_LOG.addHandler(logging.NullHandler())
_SDK_LOG.propagate = False

#: Between the entry's name and the server's tool name: ``files__read_file``.
SEPARATOR = "__"
DEFAULT_TIMEOUT_S = 30.0
#: Longest tool name the OpenAI API accepts.
MAX_NAME = 64
#: The most tools (and pages of its tool list) a server may list. Far more than any model
#: is offered at once; a server whose list does not end (a next page forever) held the
#: start for its whole ``start_timeout_s`` (30 s, 700 MB of tools) and then failed as
#: "did not start".
MAX_TOOLS = 5000
#: Characters of an error (an ``isError`` result's text, the server's refusal) the model sees.
ERROR_TEXT_CHARS = 2000
#: Characters of the server's stderr (its end) shown when it fails to start.
STDERR_TAIL = 1500
#: How long a failed start waits for the rest of the stopped server's stderr.
STDERR_WAIT_S = 5.0
#: How long ``aclose`` waits for the SDK's shutdown (it escalates to SIGKILL within ~4 s).
STOP_WAIT_S = 10.0
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_-]")


def is_server_tool(name: str, servers: Sequence[str]) -> bool:
    """Whether ``name`` has the form of a tool of one of the MCP entries ``servers``."""
    server, sep, tool = name.partition(SEPARATOR)
    return bool(sep and tool and server in servers)


def _tool_name(server: str, remote: str) -> str:
    return (server + SEPARATOR + _NOT_IN_NAMES.sub("_", remote))[:MAX_NAME]


async def check_servers(
    servers: Sequence[McpServer], secrets: frozenset[str] = frozenset()
) -> list[Diagnostic]:
    """Start each server, check that it offers every tool the agent names for it, and stop
    it: a problem for each one that cannot start or lacks a named tool (``secrets`` are
    kept out of the messages)."""
    problems: list[Diagnostic] = []
    for server in servers:
        try:
            names = sorted(tool.name for tool in await server.tools())
        except ToolError as exc:
            problems.append(Diagnostic(*server.position, redact(str(exc), secrets)))
            continue
        finally:
            await server.aclose()
        for name, (path, line, col) in server.expected:
            if name in names:
                continue
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(
                Diagnostic(
                    path,
                    line,
                    col,
                    redact(
                        f"'{name}' is not a tool of {server.describe()}{hint} "
                        f"(its tools: {', '.join(names) or 'none'})",
                        secrets,
                    ),
                )
            )
    return problems


class McpTool(ConfiguredTool):
    """One tool of an MCP server, as the runtime offers it."""

    kind = "mcp"

    def __init__(
        self,
        server: McpServer,
        remote_name: str,
        description: str,
        parameters: Mapping[str, JSONValue],
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(name or _tool_name(server.name, remote_name), description, parameters)
        self.server = server
        #: The tool's name on the server.
        self.remote_name = remote_name
        self.confirm = server.confirms(remote_name)

    async def _run(self, arguments: JSONObject) -> object:
        try:
            value = _result_value(
                await self.server.call(self.remote_name, self.name, arguments), self.name
            )
        except ToolError as exc:  # an error result, or the server's (transport errors too)
            # Redacted before the cut, which could split a secret; cut as a result is not:
            # an error result of megabytes went to the model whole.
            text = redact(str(exc), self.server.secrets)
            raise ToolError(cap_text(text, ERROR_TEXT_CHARS)) from None
        # What a server echoes of its own credentials (env values, header tokens) never
        # reaches the model, as for http tools.
        if isinstance(value, ToolContent):
            return ToolContent(tuple(redact_json(b, self.server.secrets) for b in value.blocks))
        return redact_json(value, self.server.secrets)


@dataclass(eq=False)
class _Connection:
    """One running connection: the task owning the client context, and what it found."""

    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    stderr: _Stderr | None
    task: asyncio.Task[None] | None = None
    client: Client | None = None
    tools: tuple[McpTool, ...] = ()
    #: Why the server stopped answering (None while it answers).
    lost: str | None = None
    #: Why the transport ended the connection, when it did (a message past its cap).
    fault: str | None = None
    names: dict[str, str] = field(default_factory=dict)

    def usable(self) -> bool:
        running = asyncio.get_running_loop()
        alive = self.task is not None and not self.task.done()
        return self.loop is running and alive and self.client is not None and self.lost is None


class McpServer:
    """An MCP server whose tools an agent offers. See the module docstring."""

    kind = "mcp"

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        start_timeout_s: float | None = None,
        confirm: bool | Sequence[str] = False,
    ) -> None:
        if (command is None) == (url is None):
            raise ToolBuildError(f"tool {name!r}: give 'command' or 'url'", field="mcp")
        self.name = name
        self.url = url
        self.headers = dict(headers or {})
        self.env = dict(env or {})
        #: What its results and errors are cleaned of: every env value it is given and
        #: its headers' credentials.
        self.secrets = (*header_secrets(self.headers), *self.env.values())
        self.cwd = cwd
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        if self.timeout_s <= 0:
            raise ToolBuildError(f"tool {name!r}: timeout_s must be > 0", field="timeout_s")
        #: Starting (a program's first run may install or compile things) may take longer
        #: than a call: at least the default.
        self.start_timeout_s = start_timeout_s or max(self.timeout_s, DEFAULT_TIMEOUT_S)
        self.confirm = confirm if isinstance(confirm, bool) else tuple(confirm)
        self.command: tuple[str, ...] = ()
        if command is not None:
            found = self._find(command[0]) if command else None
            if found is None:
                program = command[0] if command else ""
                where = f"relative to {cwd}" if os.sep in program else "on PATH"
                raise ToolBuildError(
                    f"tool {name!r}: program {program!r} was not found {where}", field="command"
                )
            self.command = (found, *command[1:])
            self._shown = " ".join(command)
        else:
            self._shown = str(url)
        #: Where the entry is (path, line, col), for ``check --connect``'s errors.
        self.position: tuple[str, int, int] = ("", 0, 0)
        #: Tool names the agent's toolsets and allow/deny lists give, with where they are:
        #: ``check --connect`` verifies the server offers them.
        self.expected: list[tuple[str, tuple[str, int, int]]] = []
        self._connection: _Connection | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def __repr__(self) -> str:
        return f"McpServer(name={self.name!r})"

    @property
    def client(self) -> Client | None:
        """The connected SDK client, None when the server is not running (for measuring
        the tool kind against the bare client: ``benchmarks/mcp.py``)."""
        connection = self._connection
        return None if connection is None else connection.client

    def describe(self) -> str:
        """How error messages name the server: ``MCP server 'files' (python notes.py)``."""
        return f"MCP server {self.name!r} ({self._shown})"

    def _find(self, program: str) -> str | None:
        if os.sep in program:
            candidate = Path(program)
            if not candidate.is_absolute() and self.cwd is not None:
                candidate = self.cwd / candidate
            return str(candidate) if candidate.is_file() else None
        return shutil.which(program)

    def confirms(self, remote: str) -> bool:
        """Whether a call of the server's tool ``remote`` needs the person's approval."""
        if isinstance(self.confirm, bool):
            return self.confirm
        return any(fnmatchcase(remote, pattern) for pattern in self.confirm)

    # --- the connection ---------------------------------------------------------------

    async def tools(self) -> tuple[McpTool, ...]:
        """The server's tools, connecting first if it is not connected (a ``ToolError``
        naming the server when it cannot start)."""
        connection = self._connection
        if connection is not None and connection.usable():
            return connection.tools
        async with self._start_lock():
            connection = self._connection
            if connection is not None and connection.usable():
                return connection.tools
            self._connection = None
            if connection is not None:
                await _retire(connection)
            self._connection = await self._start()
            return self._connection.tools

    def _start_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    def _transport(self, connection: _Connection) -> Transport:
        if self.url is not None:
            from openprogram_yaml.tools.mcp_http import http_transport

            return http_transport(self.url, self.headers)
        from openprogram_yaml.tools.mcp_stdio import stdio_transport

        assert connection.stderr is not None

        def on_fault(reason: str) -> None:
            connection.fault = reason

        return stdio_transport(
            self.command,
            env=self.env,
            cwd=self.cwd,
            errlog=connection.stderr.writer,
            on_fault=on_fault,
        )

    async def _start(self) -> _Connection:
        loop = asyncio.get_running_loop()
        # Its write end is closed by ``_retire`` when the connection ends.
        stderr = _Stderr() if self.url is None else None
        connection = _Connection(loop, asyncio.Event(), stderr)
        ready: asyncio.Future[None] = loop.create_future()
        connection.task = loop.create_task(
            self._own(connection, ready), name=f"mcp server {self.name}"
        )
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await asyncio.shield(ready)
        except asyncio.CancelledError:
            await _retire(connection)
            raise
        except Exception as exc:
            from mcp import MCPError
            from mcp.types import CONNECTION_CLOSED

            if isinstance(exc, TimeoutError):
                reason = f"it did not start within {self.start_timeout_s:g}s"
            elif isinstance(inner := _innermost(exc), MCPError) and inner.code == CONNECTION_CLOSED:
                reason = "it closed the connection before answering (did it exit?)"
            else:
                reason = _reason(exc)
            await _retire(connection)
            tail = await stderr.tail() if stderr is not None else ""
            raise ToolError(
                f"{self.describe()} failed to start: {reason}"
                + (f"\nits stderr ended with:\n{tail}" if tail else "")
            ) from None
        return connection

    async def _own(self, connection: _Connection, ready: asyncio.Future[None]) -> None:
        """The task that holds the connection open until ``stop`` is set."""
        from mcp import Client

        try:
            async with Client(self._transport(connection), cache=None) as client:
                tools = await self._list(client)
                connection.client = client
                connection.tools = tools
                ready.set_result(None)
                await connection.stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                connection.lost = _reason(exc)
        finally:
            connection.client = None

    async def _list(self, client: Client) -> tuple[McpTool, ...]:
        tools: dict[str, McpTool] = {}
        cursor: str | None = None
        for _ in range(MAX_TOOLS):
            page = await client.list_tools(cursor=cursor)
            if len(tools) + len(page.tools) > MAX_TOOLS:
                raise ToolError(f"it lists more than {MAX_TOOLS:,} tools")
            # Checked in a worker thread: a page of large patterns takes a while to read
            # (``regex_safety.MAX_STEPS`` each), and the start's deadline must still hold.
            schemas = [remote.input_schema for remote in page.tools]
            risks = await asyncio.to_thread(_risky_patterns, schemas)
            for remote, risky in zip(page.tools, risks, strict=True):
                if risky is not None:
                    # The arguments are checked here before the server gets them: Python's re
                    # has no time limit, and the model writes the text.
                    pattern, risk = risky
                    raise ToolError(
                        f"its tool {remote.name!r} checks its arguments against {pattern!r}, "
                        f"which {risk.shape}: checking text against it can take exponential "
                        "time, holding the run"
                    )
                tool = McpTool(self, remote.name, remote.description or "", remote.input_schema)
                if tool.name in tools:
                    raise ToolError(
                        f"two of its tools are both named {tool.name!r} here "
                        f"({tools[tool.name].remote_name!r} and {remote.name!r})"
                    )
                tools[tool.name] = tool
            cursor = page.next_cursor
            if cursor is None:
                return tuple(tools.values())
        raise ToolError(f"its tool list did not end after {MAX_TOOLS:,} pages")

    def replayed_tools(self, offered: Iterable[Mapping[str, JSONValue]]) -> tuple[McpTool, ...]:
        """The server's tools as recorded requests offered them (``offered``: tool specs,
        ``{"name", "description", "parameters"}``; any arguments when none are given), for a
        replay or an offline run, which start no server: their calls are answered from the
        recordings, by doubles or "not run". Tools of other servers are left out."""
        prefix = self.name + SEPARATOR
        tools: dict[str, McpTool] = {}
        for spec in offered:
            name, parameters = spec.get("name"), spec.get("parameters")
            if not isinstance(name, str) or not name.startswith(prefix) or name in tools:
                continue
            schema = parameters if isinstance(parameters, Mapping) else {"type": "object"}
            description = str(spec.get("description") or "")
            # The server's own name is not recorded; the part after the prefix stands in.
            tools[name] = McpTool(self, name[len(prefix) :], description, schema, name=name)
        return tuple(tools.values())

    async def call(
        self, remote: str, shown: str, arguments: Mapping[str, JSONValue]
    ) -> CallToolResult:
        """The server's answer to a call of its tool ``remote`` (``shown``: its name here).
        Its errors reach the model, so they name the entry only: the command line or URL
        (``describe``) may hold a secret."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        who = f"MCP server {self.name!r}"
        connection = self._connection
        if connection is None or not connection.usable() or connection.client is None:
            lost = f": {connection.lost}" if connection is not None and connection.lost else ""
            raise ToolError(f"{who} is not running{lost}; it starts again on the next run")
        try:
            async with asyncio.timeout(self.timeout_s):
                return await connection.client.call_tool(remote, dict(arguments))
        except TimeoutError:
            raise ToolError(
                f"{who} did not answer tool {shown!r} within {self.timeout_s:g}s"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                if connection.fault is not None:
                    connection.lost = connection.fault
                    raise ToolError(
                        f"{who} failed on tool {shown!r}: {connection.fault}, so the "
                        "connection was closed; it starts again on the next run"
                    ) from None
                connection.lost = "it stopped (connection closed)"
                raise ToolError(
                    f"{who} stopped while running tool {shown!r} (connection "
                    "closed); it starts again on the next run"
                ) from None
            raise ToolError(f"{who} refused tool {shown!r}: {exc.message}") from None
        except Exception as exc:  # transport failures (HTTP errors, a malformed answer)
            raise ToolError(f"{who} failed on tool {shown!r}: {_reason(exc)}") from None

    async def aclose(self) -> None:
        """Stop the server (a later ``tools()`` starts it again)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await _retire(connection)


async def _retire(connection: _Connection) -> None:
    """Stop a connection's task (and so its server) and wait for it to end."""
    connection.stop.set()
    task = connection.task
    try:
        if task is None or task.done():
            return
        if connection.loop is not asyncio.get_running_loop():
            # Started on another loop (a sync caller's): ask that loop, if it still runs.
            if not connection.loop.is_closed():
                connection.loop.call_soon_threadsafe(connection.stop.set)
            return
        done: set[asyncio.Task[None]] = set()
        if connection.client is not None:  # connected: it stops by leaving the client
            done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done:  # still starting (a start that failed or timed out), or stuck
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    finally:
        if connection.stderr is not None:
            connection.stderr.close_writer()


def _innermost(exc: BaseException) -> BaseException:
    """The first error inside an exception group (anyio's task groups raise them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    """What went wrong, from the innermost error of an exception group."""
    exc = _innermost(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Stderr:
    """A stdio server's stderr: a pipe that a thread of its own reads to the end (any loop may
    start, use and stop the server), keeping the last ``4 * STDERR_TAIL`` bytes."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        #: Given to the server's process; this process's copy is closed by ``close_writer``.
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._ended = threading.Event()
        reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        try:
            reader.start()
        except BaseException:
            os.close(read_fd)
            self.writer.close()
            raise

    def _read(self, read_fd: int) -> None:
        try:
            while chunk := os.read(read_fd, 65536):
                with self._lock:
                    self._kept += chunk
                    del self._kept[: -4 * STDERR_TAIL]
        finally:
            os.close(read_fd)
            self._ended.set()

    def close_writer(self) -> None:
        """Close this process's copy of the write end: once the server (and whatever it
        started) has exited too, the reader sees the end of the stream."""
        with contextlib.suppress(OSError):
            self.writer.close()

    async def tail(self) -> str:
        """The end of what the stopped server wrote (waits for it to be read, briefly)."""
        self.close_writer()
        await asyncio.to_thread(self._ended.wait, STDERR_WAIT_S)
        with self._lock:
            text = self._kept.decode("utf-8", "replace").strip()
        return text if len(text) <= STDERR_TAIL else "…" + text[-STDERR_TAIL:]


def _risky_patterns(
    schemas: Sequence[Mapping[str, object]],
) -> list[tuple[str, Backtracking] | None]:
    """``_risky_pattern`` of each of a page's input schemas."""
    return [_risky_pattern(schema) for schema in schemas]


def _risky_pattern(schema: Mapping[str, object]) -> tuple[str, Backtracking] | None:
    """A regular expression of ``schema`` (a ``pattern``, or a key of ``patternProperties``,
    at any depth) that can take exponential time (``regex_safety``) and why, or None."""
    pending: list[object] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, Mapping):
            continue
        pattern, patterned = node.get("pattern"), node.get("patternProperties")
        patterns = [pattern] if isinstance(pattern, str) else []
        if isinstance(patterned, Mapping):
            patterns += [key for key in patterned if isinstance(key, str)]
        for text in patterns:
            risk = exponential_backtracking(text)
            if risk is not None:
                return text, risk
        pending.extend(node.values())
    return None


def _result_value(result: CallToolResult, name: str) -> object:
    """What the model sees of a call's result: its content blocks as text, or the
    structured content when there are none; an ``isError`` result is a ``ToolError``.

    Images, audio and binary resources (a PDF, an image) become content blocks beside the
    text (a ``ToolContent``): the runtimes show them to the model (see the providers)."""
    blocks = [_block(block) for block in result.content]
    text = "\n".join(str(b["text"]) for b in blocks if b["type"] == "text" and b["text"])
    if result.is_error:
        raise ToolError(text or f"tool {name!r} reported an error")
    if not blocks and result.structured_content is not None:
        return result.structured_content
    if any(b["type"] != "text" for b in blocks):
        return ToolContent(tuple(b for b in blocks if b["type"] != "text" or b["text"]))
    return text or "(no output)"


def _block(block: ContentBlock) -> JSONObject:
    """One MCP content block as a runtime content block (text, image, audio or file)."""
    from mcp.types import (
        AudioContent,
        BlobResourceContents,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return {"type": kind, "data": block.data, "mime_type": block.mime_type}
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return {"type": "text", "text": f"[resource {resource.uri}]\n{resource.text}"}
        if isinstance(resource, BlobResourceContents) and resource.mime_type:
            mime = resource.mime_type.lower()
            major = mime.partition("/")[0]
            if major in ("image", "audio", "video") or mime == "application/pdf":
                media = media_block(f"data:{mime};base64,{resource.blob}")
                if media["type"] == "file":
                    media["filename"] = str(resource.uri).rsplit("/", 1)[-1] or "file.pdf"
                return media
        mime = resource.mime_type or "binary"
        return {"type": "text", "text": f"[resource {resource.uri}: {mime}, not shown]"}
    if isinstance(block, ResourceLink):
        return {"type": "text", "text": f"[resource link {block.uri}: {block.name}]"}
    return {"type": "text", "text": f"[{getattr(block, 'type', 'unknown')} content, not shown]"}
