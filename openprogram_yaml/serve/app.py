"""The server's state, its aiohttp application, and the listening server around it.

``create_app(state)`` builds the ``aiohttp.web.Application``: the middlewares below, then the
routes each module gives (``def routes(state: ServeState) -> list[web.RouteDef]``).
``Server(state)`` listens on ``state.host`` and passes every connection through
``connections.ConnectionGuard`` (connection cap, header deadlines), then shuts down with a
grace period for runs in flight.

Middlewares, outermost first; each refusal is ``{"error": "..."}`` with its status:

1. ``connection``: tells the connection's guard a request started and ended (the header
   deadline stops, the idle one starts); sends a refusal of a body left unread (``body``'s
   408 and 413, in their final shape) and half-closes the connection (the rest of the body
   is read and dropped, so that the client reads the refusal, then it closes).
2. ``openai_api.openai_errors``: the refusals below, for a ``/v1/`` path, in OpenAI's
   error shape, which its clients read.
3. ``errors``: a route's ``Refused`` and aiohttp's own refusals (404, 405, 413) as JSON;
   any other exception is a 500 whose detail goes to the server's log, redacted, never to
   the client.
4. ``guard``: the ``Host`` and ``Origin`` checks of ``guard.origin_refusal`` (400, 403).
5. ``auth``: with a token (``--token`` / ``OPENPROGRAM_SERVE_TOKEN``), every route needs it.
6. ``body``: a request's body is read whole, within ``ServeLimits.body_timeout_s`` (408 and
   the connection closed otherwise); a compressed one (``Content-Encoding``) is refused
   with 415, never inflated; one whose ``Content-Length`` is past ``MAX_BODY`` is refused
   with 413 before any of it is read, and the connection closed.

A request that ``guard`` or ``auth`` refuses never has its body kept (a stranger's
connections must not make the server hold ``MAX_BODY`` each): the body is read and dropped
within the same deadline, then the refusal is sent (closing with the body unread would reset
the connection, and the client could lose the reply); past the deadline the connection closes.

How a client shows the token: an API client sends
``Authorization: Bearer <token>``. A browser cannot add that header to a page it navigates
to, so the first visit is ``GET /?token=<token>`` (any GET path works): the server answers
``303 See Other`` to the same address without ``token``, setting the cookie
``openprogram_token_<port>`` (HttpOnly, SameSite=Strict, Path=/), and from then on the page's
own requests (``fetch``, ``EventSource``) carry the cookie by themselves. The page needs no
code for it and never sees the token. The startup line prints only the address without it.
A wrong or missing token: ``401`` with ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from aiohttp import web

from ..access import is_loopback, token_matches
from ..json_types import JSONObject
from ..redaction import env_secrets, redact
from ..run.questions import PendingQuestions
from ..run.record import run_secrets
from ..run.reload import ProgramHolder
from ..run.service import RunService
from ..run.sessions import DEFAULT_BUSY_TIMEOUT_S, SessionStore, sessions_path
from .connections import CallLater, ConnectionGuard, Deadline, call_later, half_close
from .guard import LOOPBACK_HOSTS, TOKEN_COOKIE, ServeLimits, origin_refusal, shown
from .history import RunHistory

if TYPE_CHECKING:
    from ..compile.program import Agent, Program

__all__ = ["MAX_BODY", "Refused", "ServeState", "Server", "create_app", "error_reply"]

#: The largest request body served (aiohttp's ``client_max_size``); larger ones get 413.
#: Room for a file input at its cap (``runtime.content.MAX_MEDIA_BYTES``, 20 MiB) as base64
#: in a data URL (4/3 of it), with the rest of the inputs.
MAX_BODY = 28 << 20

_TOO_LARGE = f"the body may hold at most {MAX_BODY} bytes"

#: Seconds a connection gets to send its answer once its run ended, at shutdown.
SEND_GRACE_S = 5.0

#: Where aiohttp reports requests it could not parse (a client's fault, answered 400): not
#: shown, or every malformed request would print a traceback on the server's stderr.
_PROTOCOL_LOG = logging.getLogger("openprogram_yaml.serve.protocol")
_PROTOCOL_LOG.addHandler(logging.NullHandler())
_PROTOCOL_LOG.propagate = False

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class ServeState:
    """What the routes share: the program, the runs, the limits, the secrets to hide."""

    holder: ProgramHolder
    service: RunService
    #: The model every run uses unless ``?model=`` names another (``--model``).
    model: str | None = None
    limits: ServeLimits = field(default_factory=ServeLimits)
    #: The address listened on; beyond loopback a token is required.
    host: str = "127.0.0.1"
    #: The bearer token every request must show; None: none (loopback only). A secret.
    token: str | None = field(default=None, repr=False)
    #: Where the server says what it did (stderr); None: quiet.
    log: TextIO | None = None
    #: Opens a deadline (``asyncio.timeout``); tests pass their own.
    deadline: Deadline = asyncio.timeout
    #: Sets a connection's deadlines (the event loop's ``call_later``); tests pass their own.
    call_later: CallLater = call_later
    history: RunHistory = field(default_factory=RunHistory)
    #: The questions runs wait on: the service's asker when it is one.
    questions: PendingQuestions = field(default_factory=PendingQuestions)
    #: Set when the server shuts down: streams that never end by themselves (``/events``) end.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    #: The port listened on, once listening.
    port: int = 0
    #: The open connections (set by ``Server.start``).
    connections: ConnectionGuard | None = None
    #: How long a session step waits for another process's lock on the store before it is
    #: refused with 503 (``SessionStore.busy_timeout_s``).
    sessions_busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
    #: Chat sessions (``?session=NAME`` on ``POST /run``), opened when a run first names one.
    _sessions: SessionStore | None = field(default=None, init=False, repr=False)
    #: The secrets of every agent of a version (``secrets``), kept with the version and
    #: the environment's secrets they were read with.
    _agent_secrets: tuple[Program, frozenset[str], frozenset[str]] | None = field(
        default=None, init=False, repr=False
    )

    #: Bound beyond loopback (behind a token): any ``Host`` name is served.
    any_host: bool = field(init=False)
    #: Names served at any port: ``--allow-host`` ones and a loopback address bound.
    allowed_hosts: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.service.asker, PendingQuestions):
            self.questions = self.service.asker
        # Worked out once: every request's Host check reads them.
        self.any_host = not is_loopback(self.host)
        names = {h.lower() for h in self.limits.allowed_hosts}
        if not self.any_host:
            bound = f"[{self.host}]" if ":" in self.host else self.host
            if bound.lower() not in LOOPBACK_HOSTS:
                names.add(bound.lower())
        self.allowed_hosts = frozenset(names)

    @property
    def sessions(self) -> SessionStore:
        """The project's chat sessions (``run.sessions``), in its ``.openprogram`` folder."""
        if self._sessions is None:
            program, _ = self.holder.snapshot()
            path = sessions_path(program.root)
            self._sessions = SessionStore(path, busy_timeout_s=self.sessions_busy_timeout_s)
        return self._sessions

    @property
    def token_cookie(self) -> str:
        return f"{TOKEN_COOKIE}_{self.port}"

    def secrets_of_server(self) -> frozenset[str]:
        """The server's own secrets (the token)."""
        return frozenset({self.token} if self.token else ())

    def secrets(self) -> frozenset[str]:
        """Every agent's secrets, the environment's secret-looking values and the token:
        never shown in a reply or the log.

        The agents' are worked out again only for a new program version or a changed
        environment (502 agents took 10 ms a request): their ``${env:…}`` values are the
        version's, but the value of a key variable (``api_key_env``) and the environment's
        secret-looking values are read as each run reads them, and the process may change
        its environment (``env_secrets()`` hands back a new set then).
        """
        environ = env_secrets()
        program = self.holder.program
        if program is None:
            return self.secrets_of_server() | environ
        cached = self._agent_secrets
        if cached is None or cached[0] is not program or cached[1] is not environ:
            found: set[str] = set()
            for agent in program.agents.values():
                found |= run_secrets(agent)
            cached = self._agent_secrets = (program, environ, frozenset(found))
        return cached[2] | environ | self.secrets_of_server()

    def secrets_of_run(self, agent: Agent) -> frozenset[str]:
        """What a run of ``agent`` must not show (``run_secrets``), and the token: for what
        streams from a run before its record (which holds its own) is there."""
        return run_secrets(agent) | self.secrets_of_server()

    def redacted(self, out: JSONObject) -> JSONObject:
        """``out`` with every secret shown as ``***`` (a question's text may hold one)."""
        text = redact(json.dumps(out, ensure_ascii=False, default=repr), self.secrets())
        redacted: JSONObject = json.loads(text)
        return redacted

    def say(self, line: str, secrets: Iterable[str] | None = None) -> None:
        """A line for the server's log, with ``secrets`` (default: every one the server
        knows) and the token redacted."""
        if self.log is not None:
            hidden = self.secrets() if secrets is None else {*secrets, *self.secrets_of_server()}
            self.log.write(redact(line, hidden).rstrip("\n") + "\n")
            self.log.flush()


class Refused(Exception):
    """A request a route will not serve: raised anywhere below a handler, answered by the
    error middleware as ``error_reply(status, error)``."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


def error_reply(status: int, error: str, **headers: str) -> web.Response:
    """A refusal: ``{"error": ...}`` with ``status``."""
    return web.json_response({"error": error}, status=status, headers=headers or None)


def create_app(state: ServeState) -> web.Application:
    """The application: the middlewares the module describes, then every route."""
    from . import openai_api, runs
    from . import web as web_page

    app = web.Application(
        middlewares=[
            _connection_middleware(state),
            openai_api.openai_errors,  # the refusals below, for /v1/ in OpenAI's shape
            _error_middleware(state),
            _guard_middleware(state),
            _auth_middleware(state),
            _body_middleware(state),
        ],
        client_max_size=MAX_BODY,
    )
    app.add_routes(runs.routes(state))
    app.add_routes(openai_api.routes(state))
    app.add_routes(web_page.routes(state))
    return app


# --- middlewares ----------------------------------------------------------------------------


def _connection_middleware(state: ServeState) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def connection(request: web.Request, handler: Handler) -> web.StreamResponse:
        guarded = state.connections.of(request) if state.connections else None
        if guarded is not None:
            guarded.request_started()
        try:
            response = await handler(request)
            if response.get(_BODY_UNREAD):
                # Sent here, after the middlewares within (a /v1/ refusal in OpenAI's
                # shape), then the connection half-closed (``connections.half_close``):
                # the rest of the body is read and dropped, never read as a request.
                await response.prepare(request)
                await response.write_eof()
                if guarded is not None:
                    guarded.half_close()
                elif request.transport is not None:
                    half_close(request.transport)
            return response
        finally:
            if guarded is not None:
                guarded.request_ended()

    return connection


#: Marks a reply sent before its request's body was read, that closes the connection.
_BODY_UNREAD = web.ResponseKey("body_unread", bool)


def _closing(reply: web.Response) -> web.Response:
    """``reply``, marked to be sent by the connection middleware, which then closes the
    connection (``_BODY_UNREAD``)."""
    reply.force_close()
    reply[_BODY_UNREAD] = True
    return reply


def _error_middleware(state: ServeState) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refused as exc:
            return error_reply(exc.status, exc.error)
        except web.HTTPMethodNotAllowed as exc:
            allowed = " or ".join(sorted(exc.allowed_methods))
            return error_reply(405, f"use {allowed} {request.path}")
        except web.HTTPNotFound:
            return error_reply(404, "no such route; try POST /run/{agent}/{method}, GET /agents")
        except web.HTTPRequestEntityTooLarge:
            return error_reply(413, _TOO_LARGE)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise  # redirects
            return error_reply(exc.status, exc.text or exc.reason, **_extra_headers(exc))
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # a bug must cost one request a 500, not the connection
            state.say(f"500 internal error: {exc!r}")
            return error_reply(500, f"internal error ({type(exc).__name__}); see the server's log")

    return errors


def _extra_headers(exc: web.HTTPException) -> dict[str, str]:
    return {k: v for k, v in exc.headers.items() if k.lower() == "www-authenticate"}


def _body_middleware(state: ServeState) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def body(request: web.Request, handler: Handler) -> web.StreamResponse:
        # A list (RFC 9110: "gzip, br", maybe over two headers); identity and empty
        # elements are no coding (an empty value was refused).
        parts = (
            part.strip().lower()
            for value in request.headers.getall("Content-Encoding", ())
            for part in value.split(",")
        )
        coding = ", ".join(part for part in parts if part and part != "identity")
        if coding and request.can_read_body:
            # Not decompressed (Server: auto_decompress=False): 1 MB of gzip is 1 GB of
            # JSON, which aiohttp's parser inflated as it arrived, before any limit (a peak
            # of 350 MB a request), and a body that was no gzip at all was a 500.
            refusal = error_reply(
                415, f"send the body uncompressed (Content-Encoding '{shown(coding)}' is not read)"
            )
            return await _refused_unread(state, request, refusal)
        declared = request.content_length
        if declared is not None and declared > MAX_BODY:
            # Said by the headers: refused at once, the body never read (it was waited for,
            # and a client that sent only the headers got a 408 when the deadline passed).
            return _closing(error_reply(413, _TOO_LARGE))
        # A body that has all arrived (most: it came with the headers) needs no deadline.
        if request.can_read_body and not request.content.is_eof():
            seconds = state.limits.body_timeout_s
            try:
                async with state.deadline(seconds):
                    await request.read()  # kept: the handler's read() returns it
            except TimeoutError:
                late = f"the request body did not arrive within {seconds:g} s"
                return _closing(error_reply(408, late))
        return await handler(request)

    return body


def _guard_middleware(state: ServeState) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        refusal = origin_refusal(
            request.headers, state.port, state.allowed_hosts, any_host=state.any_host
        )
        if refusal is not None:
            return await _refused_unread(state, request, error_reply(*refusal))
        return await handler(request)

    return guard


def _auth_middleware(state: ServeState) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        token = state.token
        if token is None:
            return await handler(request)
        scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
        bearer = sent.strip() if scheme.lower() == "bearer" else None
        if token_matches(bearer, token) or token_matches(
            request.cookies.get(state.token_cookie), token
        ):
            return await handler(request)
        if request.method == "GET" and token_matches(request.query.get("token"), token):
            # A browser's first visit: keep the token in a cookie, out of the address bar.
            seen = web.HTTPSeeOther(_without_token(request))
            seen.set_cookie(state.token_cookie, token, httponly=True, samesite="Strict", path="/")
            raise seen
        refusal = error_reply(
            401,
            "this server needs its token: send 'Authorization: Bearer <token>' "
            "(a browser: open /?token=<token> once)",
            **{"WWW-Authenticate": 'Bearer realm="openprogram"'},
        )
        return await _refused_unread(state, request, refusal)

    return auth


def _without_token(request: web.Request) -> str:
    """Where a first visit with ``?token=`` goes: the same address without it, and never
    another site's (a path beginning ``//`` or ``/\\`` reads as one in a ``Location``:
    ``//evil.example/?token=…`` sent the browser there)."""
    kept = request.rel_url.without_query_params("token")
    path = "/" + kept.raw_path.lstrip("/\\")
    return f"{path}?{kept.raw_query_string}" if kept.raw_query_string else path


async def _refused_unread(
    state: ServeState, request: web.Request, reply: web.Response
) -> web.Response:
    """``reply`` to a request refused before its body was read: the body is read and
    dropped (never kept) within ``ServeLimits.body_timeout_s``; past it, the connection
    closes after the reply. A body declared past ``MAX_BODY`` is not waited for: the reply
    goes at once, and the connection half-closes (what still comes is dropped)."""
    declared = request.content_length
    if declared is not None and declared > MAX_BODY:
        # A client that sent only the headers waited out the body deadline (30 s) for its
        # refusal, as the body middleware's 413 once did.
        return _closing(reply)
    if request.can_read_body and not request.content.is_eof():
        try:
            async with state.deadline(state.limits.body_timeout_s):
                while await request.content.readany():
                    pass
        except TimeoutError:
            reply.force_close()
    return reply


# --- the listening server -------------------------------------------------------------------


class Server:
    """``create_app(state)`` served on ``state.host``: connections guarded, shutdown graceful."""

    def __init__(self, state: ServeState, app: web.Application | None = None) -> None:
        self.state = state
        self.app = app if app is not None else create_app(state)
        self._runner: web.AppRunner | None = None
        self._listening: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        """Listen on ``state.host``:``port`` (0: any free port); returns the port."""
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=SEND_GRACE_S,
            logger=_PROTOCOL_LOG,
            auto_decompress=False,  # a compressed body is refused (the body middleware)
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        guard = ConnectionGuard(server, self.state.limits, self.state.call_later)
        self.state.connections = guard
        loop = asyncio.get_running_loop()
        try:
            self._listening = await loop.create_server(
                guard, self.state.host, port, reuse_address=True
            )
        except OSError:
            await self._runner.cleanup()
            raise
        sockets = self._listening.sockets
        self.state.port = sockets[0].getsockname()[1] if sockets else port
        return self.state.port

    async def close(self, grace_s: float, force: asyncio.Event | None = None) -> None:
        """Stop accepting; let runs in flight finish within ``grace_s``; answer them; close."""
        state = self.state
        if self._listening is not None:
            self._listening.close()
        state.stopping.set()  # /events streams end
        if state.connections is not None:
            state.connections.close_idle()
        await state.service.shutdown(grace_s, force)
        if self._runner is not None:
            # Each run has ended: its connection gets a moment to send the record, then
            # every connection closes.
            await self._runner.cleanup()
        if state.connections is not None:
            for connection in list(state.connections.turned_away):
                connection.close()


def is_wildcard(host: str) -> bool:
    """Whether ``host`` means every address of the machine (0.0.0.0, ::, or empty)."""
    return host in ("", "0.0.0.0", "::")


def shown_host(host: str) -> str:
    """``host`` as a URL shows it: the machine's name for a wildcard, IPv6 bracketed."""
    if is_wildcard(host):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host
