"""``openprogram-run mcp``: load a repository, serve it over stdio or streamable HTTP, watch
its files, and stop cleanly.

stdio (the default) is how desktop clients start a server: the client owns the process and
ends it by closing stdin. stdout is the protocol, so everything this process says goes to
stderr (the SDK's transport points fd 1 at stderr while it serves, so a stray print from a
tool cannot corrupt the stream either).

``--http`` serves ``/mcp`` on 127.0.0.1 with the SDK's streamable HTTP app under uvicorn
(both come with the ``mcp`` package), with ``serve``'s rules: any host but loopback needs a
token, which every request must show (``access``). Bound to loopback, the SDK's DNS-rebinding
protection admits only loopback ``Host`` names at this port and loopback ``Origin``s.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..access import server_token
from ..errors import ConfigError
from ..redaction import redact
from ..run.record import RecordLog
from ..run.reload import ProgramHolder, describe_failure, describe_reload
from ..run.service import RunService
from ..run.shutdown import DEFAULT_GRACE_S, stop_on_signals
from ..shown_text import shown_on_terminal
from .asking import ElicitingAsker
from .server import RepositoryServer

if TYPE_CHECKING:
    import mcp_types as types
    import uvicorn
    from mcp.shared.message import SessionMessage

__all__ = ["MCP_PATH", "serve_repository"]

#: Where ``--http`` serves the protocol.
MCP_PATH = "/mcp"


def _say(text: str) -> None:
    """A line on stderr, shown as text, never obeyed: it may quote the repository's files
    (a problem of a reload)."""
    text = shown_on_terminal(text)
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


async def serve_repository(
    path: Path,
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8766,
    token: str | None = None,
    model: str | None = None,
    records: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    watch: bool = True,
    live_tools: bool = False,
    approve_all: bool = False,
) -> int:
    """The exit status: 0 after a clean end, 2 for bad config or flags. ``token`` None reads
    ``OPENPROGRAM_SERVE_TOKEN`` (``--http`` only)."""
    if http:
        token, problem = server_token(host, token)
        if problem is not None:
            _say(problem)
            return 2
    holder = ProgramHolder(path, ignore=[records] if records else ())
    try:
        await asyncio.to_thread(holder.load)
    except ConfigError as exc:
        _say(describe_failure(exc.diagnostics) + " Nothing to serve.")
        return 2
    repo: RepositoryServer
    service = RunService(
        holder.snapshot,
        RecordLog(records) if records else None,
        live_tools=live_tools,
        asker=ElicitingAsker(lambda: repo.secrets()),
        approve_all=approve_all,
    )
    secrets = frozenset({token} if http and token else ())
    repo = RepositoryServer(holder, service, model=model, server_secrets=secrets)
    holder.listeners.append(lambda event: _say(redact(describe_reload(event), repo.secrets())))
    stop, force = asyncio.Event(), asyncio.Event()
    watch_stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(watch_stop)) if watch else None
    try:
        if watcher is not None:
            await _watching(holder, watcher)
        with stop_on_signals(stop, force):
            if http:
                return await _serve_http(repo, host, port, token, stop, force, grace_s, watch)
            return await _serve_stdio(repo, stop, force, grace_s, watch)
    finally:
        watch_stop.set()
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)


async def _watching(holder: ProgramHolder, watcher: asyncio.Task[None]) -> None:
    """Wait until every later save will be seen (or the watcher failed to start)."""
    ready = asyncio.create_task(holder.watching.wait())
    await asyncio.wait({ready, watcher}, return_when=asyncio.FIRST_COMPLETED)
    if watcher.done():
        ready.cancel()
        watcher.result()


def _started(repo: RepositoryServer, where: str, watch: bool, token: bool = False) -> str:
    program, stamp = repo.holder.snapshot()
    catalog = repo.catalog(program)
    return (
        f"serving {len(catalog.tools)} method{'s' if len(catalog.tools) != 1 else ''} of "
        f"{', '.join(sorted(program.agents))} over MCP "
        f"{where} (version {stamp.hash}"
        + (f"; watching {len(program.files)} files" if watch else "")
        + ("; token required" if token else "")
        + ")"
    )


async def _stop_runs(repo: RepositoryServer, grace_s: float, force: asyncio.Event) -> None:
    in_flight = len(repo.service.in_flight)
    if in_flight:
        _say(f"stopping: waiting up to {grace_s:g} s for {in_flight} run(s) in flight")
    await repo.service.shutdown(grace_s, force)
    await repo.aclose()


async def _serve_stdio(
    repo: RepositoryServer,
    stop: asyncio.Event,
    force: asyncio.Event,
    grace_s: float,
    watch: bool,
) -> int:
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    from .stdio import NO_LINES, protocol_stdin

    _say(_started(repo, "on stdio", watch) + "; the client ends it by closing stdin")
    async with (
        protocol_stdin() as stdin,
        # Given no lines, the SDK's transport serves stdout alone; the messages come from
        # StdinMessages (cancellably, each line parsed once). Without it, the SDK reads.
        stdio_server(stdin=cast("Any", NO_LINES if stdin is not None else None)) as (
            read_stream,
            write_stream,
        ),
    ):
        reading = None
        if stdin is not None:
            stdin.refuse = partial(_answer, write_stream.send)
            messages, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception]()
            reading = asyncio.create_task(stdin.pass_on(messages))
        session = asyncio.create_task(
            repo.server.run(read_stream, write_stream, repo.initialization_options())
        )
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({session, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        # The client closed stdin (or a signal came): runs in flight finish, then the pipe
        # closes, so answers still in flight reach a client that is still reading.
        await _stop_runs(repo, grace_s, force)
        session.cancel()
        await asyncio.gather(session, return_exceptions=True)
        if stdin is not None:
            stdin.end()  # the reader waits for the next line until then
        if reading is not None:
            await asyncio.gather(reading, return_exceptions=True)
    _say("stopped")
    return 0


async def _answer(
    send: Callable[[SessionMessage], Awaitable[None]], error: types.JSONRPCError
) -> None:
    """Send ``error`` to the stdio client (a line the SDK would have dropped unanswered)."""
    from mcp.shared.message import SessionMessage

    await send(SessionMessage(error))


async def _serve_http(
    repo: RepositoryServer,
    host: str,
    port: int,
    token: str | None,
    stop: asyncio.Event,
    force: asyncio.Event,
    grace_s: float,
    watch: bool,
) -> int:
    from .http import http_app

    try:
        listening = _bind(host, port)
    except OSError as exc:
        _say(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}")
        return 2
    bound = listening.getsockname()[1]
    server = _uvicorn(http_app(repo, host, bound, token), grace_s)
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    # Every address of the machine (0.0.0.0, ::): the name others reach it by.
    shown = socket.gethostname() if host in ("", "0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    _say(_started(repo, f"at http://{shown}:{bound}{MCP_PATH}", watch, bool(token)))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    await _stop_runs(repo, grace_s, force)
    server.should_exit = True
    await asyncio.gather(serving, return_exceptions=True)
    listening.close()
    _say("stopped")
    return 0


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port), IPv4 or IPv6."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP (the
    # accepted ones copy this), and without it a JSON reply waited 40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _uvicorn(app: Any, grace_s: float) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn without its own signal handling: the driver owns Ctrl-C and SIGTERM
        (uvicorn's would re-raise the signal after its shutdown and end the process before
        the runs in flight are recorded)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=max(1, int(grace_s)),
    )
    return Server(config)
