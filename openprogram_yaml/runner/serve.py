"""``openprogram-run serve``: a local HTTP server that runs agents while their files change.

Why HTTP: it is what an application under development calls (any language, any HTTP
client, concurrent runs), and it stays scriptable
(``curl -H 'Content-Type: application/json' -d '{"ticket": "..."}' URL``).
It listens on 127.0.0.1 only and has no authentication: it is a development server for one
machine, built on asyncio's streams so it adds no dependency.

Any web page the developer opens can send requests to 127.0.0.1: the server answers only
requests meant for it (``request_guard``). ``?model=`` may only name a model the project
uses. Slow or idle clients are cut off and connections are capped (``ServeLimits``), so a
stranger cannot hold every file descriptor.

    POST /run/{agent}/{method}[?model=M]   body: the inputs as a JSON object → the run record
    GET  /health                           status, the serving version, runs in flight
    GET  /version                          the serving version, its files, the last reload
    GET  /agents                           agents, their methods and inputs

A run's HTTP status: 200 ok, 400 bad inputs, 404 no such agent or method, 502 the model call
failed, 500 any other failure, 503 interrupted by shutdown. The body is always the record.
Refused requests get 400, 403, 408, 413, 415, 431 or 503 with ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from urllib.parse import parse_qs, unquote, urlsplit

from .._file_writes import cannot_write
from ..compile.program import Method, Program
from ..errors import ConfigError, Diagnostic, UsageError
from ..json_types import JSONObject, JSONValue
from ..redaction import redact
from ..run.questions import PendingQuestions, question_list
from ..run.record import RecordLog, RunRecord, append_trace, run_secrets
from ..run.service import RunService
from ..runtime.trace import SessionTrace
from .reload import ProgramHolder, ReloadEvent
from .request_guard import MAX_JSON_DEPTH, ServeLimits, media_refusal, nests_deeper, origin_refusal

__all__ = [
    "DEFAULT_GRACE_S",
    "HttpServer",
    "describe_reload",
    "serve",
    "serve_path",
    "watch_and_run",
]

MAX_BODY = 1 << 20
MAX_HEADERS = 100

_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class _Request:
    """One HTTP request, as read off the connection."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


@dataclass(frozen=True, slots=True)
class _Head:
    """A request's line and headers; the body is read after them, under its own deadline."""

    method: str
    target: str
    version: str
    headers: dict[str, str]


async def _read_head(reader: asyncio.StreamReader, first: bytes) -> _Head:
    """The request line and headers; ``first`` is the byte already read."""
    try:
        line = first + await reader.readline()
    except ValueError as exc:  # longer than the stream limit
        raise _HttpError(400, "request line too long") from exc
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _HttpError(400, "malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        try:
            raw = await reader.readline()
        except ValueError as exc:
            raise _HttpError(431, "header line too long") from exc
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise _HttpError(431, "too many headers")
    return _Head(method, target, version, headers)


def _body_length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise _HttpError(501, "chunked bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError as exc:
        raise _HttpError(400, "bad Content-Length") from exc
    if length < 0 or length > MAX_BODY:
        raise _HttpError(413, f"the body may hold at most {MAX_BODY} bytes")
    return length


def _status_of(record: RunRecord) -> int:
    if record.status == "ok":
        return 200
    if record.status == "interrupted":
        return 503
    kind = (record.error or {}).get("type", "")
    if record.exit_code == 2:
        return 400
    return 502 if kind == "LLMError" else 500


class HttpServer:
    """Serves runs from ``service`` on the version ``holder`` holds."""

    def __init__(
        self,
        holder: ProgramHolder,
        service: RunService,
        *,
        model: str | None = None,
        log: TextIO | None = None,
        limits: ServeLimits | None = None,
        deadline: Callable[[float], AbstractAsyncContextManager[object]] = asyncio.timeout,
    ) -> None:
        self.holder = holder
        #: The questions runs wait on (``/questions``): the service's asker, when it is one.
        asker = service.asker
        self.questions = asker if isinstance(asker, PendingQuestions) else PendingQuestions()
        self.service = service
        self.model = model
        self.log = log
        self.limits = limits or ServeLimits()
        #: ``asyncio.timeout``; a test passes its own to decide when a deadline passes.
        self.deadline = deadline
        self._allowed_hosts = frozenset(h.lower() for h in self.limits.allowed_hosts)
        self.port = 0
        self._server: asyncio.Server | None = None
        #: Connection tasks, and which of them are answering a request (not idle).
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()
        #: Connections past the cap, being told so.
        self._turned_away: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1:``port`` (0: any free port); returns the port."""
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self, grace_s: float, force: asyncio.Event | None = None) -> None:
        """Stop accepting; let runs in flight finish within ``grace_s``; answer them; close."""
        if self._server is not None:
            self._server.close()
        for task in self._connections - self._busy:
            task.cancel()  # idle keep-alive connections
        await self.service.shutdown(grace_s, force)
        if self._busy:
            # Each run has ended; give its connection a moment to send the record.
            await asyncio.wait(set(self._busy), timeout=5)
        for task in self._connections | self._turned_away:
            task.cancel()
        if self._connections or self._turned_away:
            await asyncio.wait(self._connections | self._turned_away)

    # --- connections --------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.limits.max_connections:
            await self._turn_away(task, reader, writer)
            return
        self._connections.add(task)
        try:
            while True:
                try:
                    request = await self._read_request(reader)
                except _HttpError as exc:
                    await self._send(writer, exc.status, {"error": str(exc)}, keep_alive=False)
                    return
                if request is None:
                    return
                self._busy.add(task)
                try:
                    status, body = await self._answer(request)
                    keep = request.keep_alive and not self.service.closing
                    await self._send(writer, status, body, keep_alive=keep)
                finally:
                    self._busy.discard(task)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() ends the connection. Python 3.11's stream callback logs a cancelled
            # handler as an "unhandled exception", so the task ends normally instead.
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _turn_away(
        self, task: asyncio.Task[None], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Past the connection cap: answer 503 and close."""
        limit = self.limits.max_connections
        if len(self._turned_away) >= limit:
            writer.transport.abort()  # a flood: no reply, the file descriptor back at once
            return
        self._turned_away.add(task)
        error = f"the server is serving {limit} connections, its limit; try again shortly"
        try:
            await self._send(writer, 503, {"error": error}, keep_alive=False)
            writer.write_eof()
            # Read until the client closes: closing with its request unread would reset the
            # connection (RST), and the client could lose the 503 before reading it.
            async with self.deadline(self.limits.header_timeout_s):
                while await reader.read(1 << 16):
                    pass
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self._turned_away.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        """The next request; None when the client closed, or stayed idle past the limit."""
        limits = self.limits
        try:
            async with self.deadline(limits.header_timeout_s):
                first = await reader.read(1)
        except TimeoutError:
            return None  # idle: nothing was asked, so nothing is answered
        if not first:
            return None
        try:
            async with self.deadline(limits.header_timeout_s):
                head = await _read_head(reader, first)
        except TimeoutError:
            raise _HttpError(
                408, f"the request headers did not arrive within {limits.header_timeout_s:g} s"
            ) from None
        length = _body_length(head.headers)
        body = b""
        if length:
            try:
                async with self.deadline(limits.body_timeout_s):
                    body = await reader.readexactly(length)
            except TimeoutError:
                raise _HttpError(
                    408, f"the request body did not arrive within {limits.body_timeout_s:g} s"
                ) from None
        connection = head.headers.get("connection", "").lower()
        if head.version == "HTTP/1.1":
            keep_alive = connection != "close"
        else:
            keep_alive = connection == "keep-alive"
        url = urlsplit(head.target)
        path, query = unquote(url.path), parse_qs(url.query)
        return _Request(head.method, path, query, head.headers, body, keep_alive)

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: JSONObject | str,
        *,
        keep_alive: bool,
    ) -> None:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        data = text.encode("utf-8")
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + data)
        await writer.drain()

    async def _answer(self, request: _Request) -> tuple[int, JSONObject | str]:
        refusal = origin_refusal(request.headers, self.port, self._allowed_hosts)
        if refusal is not None:
            return refusal[0], {"error": refusal[1]}
        try:
            return await self._dispatch(request)
        except Exception as exc:  # a bug must cost one request a 500, not the connection
            if self.log is not None:
                self.log.write(redact(f"500 internal error: {exc!r}", self._secrets()) + "\n")
                self.log.flush()
            return 500, {"error": f"internal error ({type(exc).__name__}); see the server's log"}

    def _secrets(self) -> frozenset[str]:
        program = self.holder.program
        if program is None:
            return frozenset()
        return frozenset().union(*(run_secrets(a) for a in program.agents.values()))

    def _redacted(self, out: JSONObject) -> JSONObject:
        """``out`` with every agent's secrets shown as ``***`` (a question's text may hold one)."""
        redacted: JSONObject = json.loads(redact(json.dumps(out, default=repr), self._secrets()))
        return redacted

    # --- routes -------------------------------------------------------------------------

    async def _dispatch(self, request: _Request) -> tuple[int, JSONObject | str]:
        parts = [p for p in request.path.split("/") if p]
        routes: dict[str, Callable[[], JSONObject]] = {
            "health": self._health,
            "version": self._version,
            "agents": self._agents,
        }
        if len(parts) == 1 and parts[0] in routes:
            if request.method != "GET":
                return 405, {"error": f"use GET /{parts[0]}"}
            return 200, routes[parts[0]]()
        if parts and parts[0] == "questions":
            return self._questions(parts[1:], request)
        if len(parts) == 3 and parts[0] == "run":
            if request.method != "POST":
                return 405, {"error": "use POST /run/{agent}/{method} with the inputs as JSON"}
            unsupported = media_refusal(request.headers.get("content-type"))
            if unsupported is not None:
                return 415, {"error": unsupported}
            return await self._run(parts[1], parts[2], request)
        return 404, {"error": "no such route; try POST /run/{agent}/{method}, GET /agents"}

    def _questions(self, parts: list[str], request: _Request) -> tuple[int, JSONObject]:
        """``GET /questions``; ``POST /questions/{id}/answer`` with ``{"answer": …}`` and
        ``POST /questions/{id}/decline``, both sent as JSON (so no web page can post them)."""
        board = self.questions
        if not parts:
            if request.method != "GET":
                return 405, {"error": "use GET /questions"}
            return 200, self._redacted(question_list(board))
        if len(parts) != 2 or parts[1] not in ("answer", "decline"):
            return 404, {"error": "use POST /questions/{id}/answer or /questions/{id}/decline"}
        if request.method != "POST":
            return 405, {"error": f"use POST /questions/{{id}}/{parts[1]}"}
        unsupported = media_refusal(request.headers.get("content-type"))
        if unsupported is not None:
            return 415, {"error": unsupported}
        key, action = parts
        try:
            if action == "decline":
                board.decline(key)
                return 200, {"id": key, "declined": True}
            try:
                body = json.loads(request.body or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                return 400, {"error": 'the body must be JSON: {"answer": …}'}
            if not isinstance(body, dict) or "answer" not in body:
                return 400, {"error": 'the body must be a JSON object {"answer": …}'}
            problem = board.reply(key, body["answer"])
        except KeyError:
            return 404, {"error": f"no question '{key}' is waiting; GET /questions lists them"}
        if problem is not None:
            return 400, {"error": problem}
        return 200, {"id": key, "answered": True}

    def _version_dict(self) -> JSONObject:
        return self.holder.snapshot()[1].to_dict()

    def _health(self) -> JSONObject:
        return {
            "status": "ok" if self.holder.failure is None else "reload_failed",
            "version": self._version_dict(),
            "in_flight": len(self.service.in_flight),
            "reload": self._reload_report(),
        }

    def _reload_report(self) -> JSONObject:
        """The last reload's outcome: ok or failed, when, and what it said."""
        holder = self.holder
        at = holder.checked_at.isoformat(timespec="seconds") if holder.checked_at else None
        serving = holder.program.version if holder.program is not None else None
        failure = holder.failure
        if failure is None:
            return {"status": "ok", "at": at, "message": f"serving version {serving}"}
        more = f" (and {len(failure) - 1} more)" if len(failure) > 1 else ""
        return {
            "status": "failed",
            "at": at,
            "message": f"{failure[0]}{more}; still serving version {serving}",
            "diagnostics": [str(d) for d in failure],
        }

    def _version(self) -> JSONObject:
        program, stamp = self.holder.snapshot()
        files: list[JSONValue] = []
        for path in sorted(program.files):
            try:
                files.append(path.relative_to(program.root).as_posix())
            except ValueError:
                files.append(str(path))
        return {"version": stamp.to_dict(), "files": files, "reload": self._reload_report()}

    def _agents(self) -> JSONObject:
        program, _ = self.holder.snapshot()
        out: JSONObject = {}
        for agent in program.agents.values():
            out[agent.name] = {
                "description": agent.description,
                "methods": {
                    m.name: {"description": m.description, "inputs": dict(m.inputs)}
                    for m in agent.methods.values()
                },
            }
        return self._redacted(out)

    async def _run(
        self, agent: str, method: str, request: _Request
    ) -> tuple[int, JSONObject | str]:
        program, _ = self.holder.snapshot()
        found = program.agents.get(agent)
        if found is None or method not in found.methods:
            what = f"agent '{agent}'" if found is None else f"method '{method}' of '{agent}'"
            return 404, {"error": f"no {what}; GET /agents lists them"}
        too_deep: JSONObject = {
            "error": f"the body nests arrays and objects deeper than {MAX_JSON_DEPTH}"
        }
        try:
            inputs = json.loads(request.body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return 400, {"error": f"the body is not JSON: {exc}"}
        except RecursionError:
            return 400, too_deep
        if not isinstance(inputs, dict):
            return 400, {"error": "the body must be a JSON object of input names to values"}
        if nests_deeper(inputs, MAX_JSON_DEPTH):
            return 400, too_deep
        model = self.model
        if "model" in request.query:
            model = request.query["model"][-1]
            allowed = self._models(program)
            if not self.limits.allow_model_override and model not in allowed:
                return 403, {
                    "error": "?model= may only name a model this project uses "
                    f"({', '.join(sorted(allowed)) or 'none'}); "
                    "start serve with --allow-model-override to allow any"
                }
        if self.service.closing:
            return 503, {"error": "the server is shutting down"}
        task = self.service.start(agent, method, inputs, model=model)
        # Shielded: the run belongs to the service, which finishes or interrupts it on
        # shutdown; a dropped connection must not cancel it half-way.
        record = await asyncio.shield(task)
        status = _status_of(record)
        if self.log is not None:
            self.log.write(
                f"{status} {record.agent}.{record.method} {record.status} "
                f"{record.elapsed_s * 1000:.0f} ms version {record.version.hash}\n"
            )
            self.log.flush()
        return status, record.to_json()

    def _models(self, program: Program) -> set[str]:
        """The models the project's agents and methods name, and the server's ``--model``."""
        names = {self.model} if self.model else set()
        for agent in program.agents.values():
            names.update(m.options.model for m in agent.methods.values() if m.options.model)
            if agent.model:
                names.add(agent.model)
        return names


def describe_reload(event: ReloadEvent) -> str:
    """The lines a reload prints (on stderr) for a person watching."""
    changed = ", ".join(p.name for p in event.changed[:3])
    if len(event.changed) > 3:
        changed += ", …"
    why = f" ({changed} changed)" if changed else ""
    if event.status == "loaded":
        return f"reloaded{why}: version {event.version} ({event.compile_s * 1000:.0f} ms)"
    if event.status == "unchanged":
        return f"no change{why}: still version {event.version}"
    lines = [str(d) for d in event.diagnostics]
    n = len(event.diagnostics)
    keep = f"still serving version {event.version}" if event.version else "nothing to serve yet"
    lines.append(f"{n} error{'s' if n != 1 else ''} in the new version{why}; {keep}")
    return "\n".join(lines)


def _print_to(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()

    return write


async def serve(
    holder: ProgramHolder,
    service: RunService,
    *,
    port: int,
    grace_s: float,
    model: str | None,
    watch: bool,
    stop: asyncio.Event,
    force: asyncio.Event,
    on_listening: Callable[[int], None] | None = None,
    limits: ServeLimits | None = None,
) -> None:
    """Serve until ``stop`` is set, then shut down cleanly (``force`` cuts the grace short)."""
    say = _print_to(sys.stderr)
    holder.listeners.append(lambda event: say(describe_reload(event)))
    server = HttpServer(holder, service, model=model, log=sys.stderr, limits=limits)
    watcher: asyncio.Task[None] | None = None
    watch_stop = asyncio.Event()
    if watch:
        watcher = asyncio.create_task(holder.watch(watch_stop))
        ready = asyncio.create_task(holder.watching.wait())
        await asyncio.wait({ready, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            ready.cancel()
            watcher.result()
    try:
        bound = await server.start(port)
        program, stamp = holder.snapshot()
        agents = ", ".join(sorted(program.agents))
        say(
            f"serving {agents} on http://127.0.0.1:{bound} (version {stamp.hash}"
            + (f"; watching {len(program.files)} files" if watch else "")
            + "); Ctrl-C stops"
        )
        if on_listening is not None:
            on_listening(bound)
        await stop.wait()
        in_flight = len(service.in_flight)
        if in_flight:
            say(f"stopping: waiting up to {grace_s:g} s for {in_flight} run(s) in flight")
        await server.close(grace_s, force)
    finally:
        watch_stop.set()
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)
    say("stopped")


# --- the command-line drivers ----------------------------------------------------------

#: Seconds runs in flight get to finish on Ctrl-C or SIGTERM before they are interrupted.
#: Below Docker's 10 s stop timeout, so interrupted runs are recorded before a SIGKILL.
DEFAULT_GRACE_S = 8.0


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event, force: asyncio.Event) -> Iterator[None]:
    """First Ctrl-C or SIGTERM: ``stop`` (finish runs in flight). Second: ``force``."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            force.set()
        stop.set()

    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            continue
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _config_error_lines(diagnostics: Sequence[Diagnostic]) -> str:
    n = len(diagnostics)
    return "\n".join([*map(str, diagnostics), f"{n} error{'s' if n != 1 else ''} found."])


async def serve_path(
    path: Path,
    *,
    port: int,
    model: str | None = None,
    records: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    watch: bool = True,
    live_tools: bool = False,
    limits: ServeLimits | None = None,
    approve_all: bool = False,
) -> int:
    """``openprogram-run serve``: the exit status (0 after a clean shutdown, 2 bad config).
    Runs ask their questions over HTTP (``/questions``); ``approve_all`` is ``--yes``."""
    holder = ProgramHolder(path, ignore=[records] if records else ())
    try:
        await asyncio.to_thread(holder.load)
    except ConfigError as exc:
        sys.stderr.write(_config_error_lines(exc.diagnostics) + " Nothing to serve.\n")
        return 2
    log = RecordLog(records) if records else None
    questions = PendingQuestions()
    service = RunService(
        holder.snapshot, log, live_tools=live_tools, asker=questions, approve_all=approve_all
    )
    stop, force = asyncio.Event(), asyncio.Event()
    try:
        with _stop_on_signals(stop, force):
            await serve(
                holder,
                service,
                port=port,
                grace_s=grace_s,
                model=model,
                watch=watch,
                stop=stop,
                force=force,
                limits=limits,
            )
    except OSError as exc:  # the port is taken
        sys.stderr.write(f"error: cannot listen on 127.0.0.1:{port}: {exc.strerror}\n")
        return 2
    finally:
        if log is not None:
            log.close()
    return 0


async def watch_and_run(
    path: Path,
    *,
    agent: str | None,
    method: str | None,
    inputs_for: Callable[[Method], JSONObject],
    model: str | None,
    json_output: bool,
    records: Path | None = None,
    trace: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    live_tools: bool = False,
) -> int:
    """``openprogram-run PATH METHOD --watch``: run, then re-run on every new version.

    Outputs go to stdout (text, or one JSON record per run with ``--json``); reloads and
    diagnostics go to stderr. A broken edit is reported and the next fix runs again.
    """
    ignore = [p for p in (records, trace) if p is not None]
    holder = ProgramHolder(path, ignore=ignore)
    say = _print_to(sys.stderr)
    try:
        await asyncio.to_thread(holder.load)
    except ConfigError as exc:
        say(_config_error_lines(exc.diagnostics) + " Waiting for a fix…")
    log = RecordLog(records) if records else None
    service = RunService(holder.snapshot, log, live_tools=live_tools)
    new_version = asyncio.Event()

    def on_reload(event: ReloadEvent) -> None:
        say(describe_reload(event))
        if event.status == "loaded":
            new_version.set()

    def on_record(record: RunRecord) -> None:
        if json_output:
            _print_to(sys.stdout)(record.to_json())
        elif record.status == "ok":
            text = record.output if isinstance(record.output, str) else None
            if text is None:
                text = json.dumps(record.output, indent=2, ensure_ascii=False)
            _print_to(sys.stdout)(redact(text, record.secrets))
        else:
            error = record.error or {}
            message = f"error: {error.get('type')}: {error.get('message')}"
            say(redact(message, record.secrets))

    holder.listeners.append(on_reload)
    service.listeners.append(on_record)
    stop, force = asyncio.Event(), asyncio.Event()
    watch_stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(watch_stop))
    stopping = asyncio.create_task(stop.wait())
    try:
        with _stop_on_signals(stop, force):
            ready = asyncio.create_task(holder.watching.wait())
            await asyncio.wait({ready, watcher, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if watcher.done():
                watcher.result()
            if holder.program is not None:
                new_version.set()
            while not stop.is_set():
                changed = asyncio.create_task(new_version.wait())
                await asyncio.wait({changed, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    changed.cancel()
                    break
                new_version.clear()
                program, stamp = holder.snapshot()
                try:
                    found = program.agent(agent).method(method or None)
                    inputs = inputs_for(found)
                except UsageError as exc:
                    say(f"error: {exc}")
                    continue
                say(f"── {found.agent}.{found.name} on version {stamp.hash}")
                session = SessionTrace() if trace is not None else None
                task = service.start(agent, found.name, inputs, model=model, trace=session)
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if task.done() and session is not None and trace is not None:
                    try:
                        append_trace(trace, session, task.result().secrets)
                    except OSError as exc:
                        say(cannot_write(trace, exc))
            await service.shutdown(grace_s, force)
    finally:
        stopping.cancel()
        watch_stop.set()
        await asyncio.gather(watcher, return_exceptions=True)
        if log is not None:
            log.close()
    return 0
