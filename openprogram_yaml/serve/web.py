"""The web page served at ``/``: its static files, and the JSON it needs besides the runs
API (``runs.py``).

- ``GET /`` the page; ``GET /static/{name}`` its scripts and style (shipped in the package,
  nothing fetched from elsewhere, no build step);
- ``GET /api/methods/{agent}/{method}`` what the page builds a method's form from: its full
  inputs schema (properties and required), model, response format and choices;
- ``POST /api/render/{agent}/{method}`` with the inputs as JSON: exactly what the method
  would send (messages, tools, response format, options) without calling the model;
- ``GET /api/sessions[?agent=A&method=M]`` the chat sessions (``run.sessions``): name, agent,
  method, message count, when last used; ``GET /api/sessions/{name}`` one with its messages.
  A run is a session's turn with ``POST /run/A/M?session=NAME`` (``runs.py``).

The page shows everything the server sends as text, never as HTML (model output and tool
results are untrusted), and a Content-Security-Policy allows only the page's own scripts.
"""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp import web

from ..errors import UsageError
from ..json_types import JSONObject, JSONValue
from ..redaction import redact
from ..run.render import render_method
from ..run.sessions import SessionInfo, SessionMessage, SessionStoreBusy, check_name
from .app import Refused, ServeState, error_reply
from .served_run import method_at, read_inputs, status_of

__all__ = ["STATIC_DIR", "routes"]

STATIC_DIR = Path(__file__).with_name("static")

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}

#: Only the page's own files run; no inline script, no frame around it, no form posts out.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The files change with the package; a browser checks again instead of keeping old ones.
    "Cache-Control": "no-cache",
}


def routes(state: ServeState) -> list[web.RouteDef]:
    """The page's routes, for ``app.create_app``."""
    page = _WebPage(state)
    return [
        web.get("/", page.index),
        web.get("/static/{name}", page.static),
        web.get("/api/methods/{agent}/{method}", page.method_info),
        web.post("/api/render/{agent}/{method}", page.render),
        web.get("/api/sessions", page.sessions),
        web.get("/api/sessions/{name}", page.session),
    ]


class _WebPage:
    def __init__(self, state: ServeState) -> None:
        self.state = state
        # The shipped files, by name: nothing else under the folder (or outside it) is served.
        self.files = {
            p.name: p for p in STATIC_DIR.iterdir() if p.suffix in _CONTENT_TYPES and p.is_file()
        }

    async def index(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def static(self, request: web.Request) -> web.Response:
        return self._file(request.match_info["name"])

    def _file(self, name: str) -> web.Response:
        path = self.files.get(name)
        if path is None:
            return error_reply(404, f"no file '{name}' here")
        return web.Response(
            body=path.read_bytes(),
            headers={"Content-Type": _CONTENT_TYPES[path.suffix], **_PAGE_HEADERS},
        )

    async def method_info(self, request: web.Request) -> web.Response:
        program, _ = self.state.holder.snapshot()
        agent, method = method_at(program, request)
        info: JSONObject = {
            "agent": agent.name,
            "method": method.name,
            "description": method.description,
            "model": self.state.model or method.options.model or agent.model,
            "input_schema": dict(method.input_schema),
            "response_format": dict(method.response_format) if method.response_format else None,
            "choices": [
                {"name": c.name, "description": c.description, "method": c.method}
                for c in method.choices or ()
            ],
        }
        return _json(info, self.state.secrets())

    async def render(self, request: web.Request) -> web.Response:
        program, stamp = self.state.holder.snapshot()
        agent, method = method_at(program, request)
        inputs = await read_inputs(request)
        rendered = await render_method(
            program, stamp, agent.name, method.name, inputs, model=self.state.model
        )
        # The version rendered may be older than the one serving now: its own secrets too.
        secrets = self.state.secrets() | rendered.record.secrets
        if rendered.request is None:
            error = rendered.record.error or {}
            status = status_of(rendered.record)
            # The first line: the problems follow as a list of their own.
            message = str(error.get("message", "")).split("\n")[0]
            body: JSONObject = {"error": f"nothing to render: {message}"}
            problems = error.get("problems") or error.get("issues")
            if isinstance(problems, list):
                body["problems"] = [str(p) for p in problems]
            return _json(body, secrets, status=status)
        return _json({"request": rendered.request}, secrets)

    async def sessions(self, request: web.Request) -> web.Response:
        agent, method = request.query.get("agent"), request.query.get("method")
        try:
            store = self.state.sessions
            found = await store.in_worker(store.sessions)
        except SessionStoreBusy as exc:
            raise Refused(503, str(exc)) from None
        except UsageError as exc:  # a store that cannot be opened or read
            raise Refused(500, str(exc)) from None
        listed: list[JSONValue] = [
            _session_json(info)
            for info in found
            if agent in (None, info.agent) and method in (None, info.method)
        ]
        return _json({"sessions": listed}, self.state.secrets())

    async def session(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            store = self.state.sessions
            info, messages = await store.in_worker(_session_and_messages, self.state, name)
            if info is None:
                raise Refused(404, f"no session '{name}'; GET /api/sessions lists them")
        except SessionStoreBusy as exc:
            raise Refused(503, str(exc)) from None
        except UsageError as exc:  # a bad name; a store that cannot be read
            raise Refused(400, str(exc)) from None
        body: JSONObject = {
            "session": _session_json(info),
            # Stored redacted; redacted again with today's secrets as every reply is.
            "messages": [
                {
                    "role": m.role,
                    "content": m.content,
                    "created_at": m.created_at,
                    "run_id": m.run_id,
                }
                for m in messages
            ],
        }
        return _json(body, self.state.secrets())


def _session_and_messages(
    state: ServeState, name: str
) -> tuple[SessionInfo | None, list[SessionMessage]]:
    """Session ``name`` and its messages (none when there is no such session); run in the
    store's worker thread: the store may wait on another process's lock."""
    info = state.sessions.get(check_name(name))
    return info, [] if info is None else state.sessions.messages(name)


def _session_json(info: SessionInfo) -> JSONObject:
    return {
        "name": info.name,
        "agent": info.agent,
        "method": info.method,
        "messages": info.messages,
        "updated_at": info.updated_at,
    }


def _json(body: JSONObject, secrets: frozenset[str], *, status: int = 200) -> web.Response:
    """``body`` as JSON with ``secrets`` shown as ``***``."""
    return web.Response(
        text=redact(json.dumps(body, ensure_ascii=False, default=repr), secrets),
        status=status,
        content_type="application/json",
    )
