"""The routes of runs: running a method, what serves, the questions runs wait on, the reload
notices and the history of runs.

    POST /run/{agent}/{method}[?model=M][&session=NAME]
                                           body: the inputs as a JSON object → the run record
                                           (Accept: text/event-stream: the run's events, then
                                           ``event: record``); ``session``: a chat session's
                                           next turn
    GET  /health                           status, the serving version, runs in flight
    GET  /version                          the serving version, its files, the last reload
    GET  /agents                           agents, their methods and inputs
    GET  /questions                        the questions runs wait on
    POST /questions/{id}/answer            {"answer": ...}
    POST /questions/{id}/decline
    GET  /events                           reload notices as server-sent events
    GET  /runs                             the runs served (and those of --records), newest first
    GET  /runs/{id}                        one run's record and trace

A run's HTTP status (``served_run.status_of``): 200 ok, 400 bad inputs, 422 inputs the
method's template cannot render, 502 the model call failed, 500 any other failure, 503
interrupted by shutdown; the body is the record. A streamed run answers 200 at once; its
outcome is the record's ``status``. A run refused before it starts is ``{"error": ...}``:
415 a body not sent as JSON, 400 one that is not a JSON object of inputs, 404 no such agent
or method, 403 a ``?model=`` the project does not use, 400 or 409 a ``session`` it cannot
be a turn of, 503 the server is shutting down.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import partial

from aiohttp import web

from ..json_types import JSONObject, JSONValue
from ..redaction import StreamRedactor, redact
from ..run.questions import question_list
from ..run.reload import ReloadEvent, describe_reload
from .app import ServeState, error_reply
from .guard import media_refusal
from .served_run import (
    ServedRun,
    method_at,
    model_for,
    read_body_json,
    read_inputs,
    start_run,
    status_of,
)
from .sse import EventStream, wants_events

__all__ = ["KEEPALIVE_S", "reload_notice", "routes"]

#: Seconds between keep-alive comments on an idle ``/events`` stream: under the 60 s after
#: which common proxies (nginx, load balancers) cut a silent connection.
KEEPALIVE_S = 15.0


def routes(state: ServeState) -> list[web.RouteDef]:
    def get(path: str, body: Callable[[ServeState], JSONObject]) -> web.RouteDef:
        async def handler(_: web.Request) -> web.Response:
            return _json(body(state))

        return web.get(path, handler)

    return [
        get("/health", _health),
        get("/version", _version),
        get("/agents", _agents),
        get("/questions", lambda s: s.redacted(question_list(s.questions))),
        get("/runs", lambda s: {"runs": list[JSONValue](s.history.summaries())}),
        web.post("/questions/{id}/{action:answer|decline}", partial(_reply, state)),
        web.post("/run/{agent}/{method}", partial(_run, state)),
        web.get("/events", partial(_events, state)),
        web.get("/runs/{id}", partial(_one_run, state)),
    ]


def _json(body: JSONObject, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=_dumps)


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


# --- what serves ------------------------------------------------------------------------


def _health(state: ServeState) -> JSONObject:
    holder = state.holder
    return {
        "status": "ok" if holder.failure is None else "reload_failed",
        "version": holder.snapshot()[1].to_dict(),
        "in_flight": len(state.service.in_flight),
        "reload": _reload_report(state),
    }


def _reload_report(state: ServeState) -> JSONObject:
    """The last reload's outcome: ok or failed, when, and what it said."""
    holder = state.holder
    at = holder.checked_at.isoformat(timespec="seconds") if holder.checked_at else None
    serving = holder.program.version if holder.program is not None else None
    failure = holder.failure
    if failure is None:
        return {"status": "ok", "at": at, "message": f"serving version {serving}"}
    more = f" (and {len(failure) - 1} more)" if len(failure) > 1 else ""
    return state.redacted(
        {
            "status": "failed",
            "at": at,
            "message": f"{failure[0]}{more}; still serving version {serving}",
            "diagnostics": [str(d) for d in failure],
        }
    )


def _version(state: ServeState) -> JSONObject:
    program, stamp = state.holder.snapshot()
    files: list[JSONValue] = []
    for path in sorted(program.files):
        try:
            files.append(path.relative_to(program.root).as_posix())
        except ValueError:
            files.append(str(path))
    return {"version": stamp.to_dict(), "files": files, "reload": _reload_report(state)}


def _agents(state: ServeState) -> JSONObject:
    program, _ = state.holder.snapshot()
    out: JSONObject = {}
    for agent in program.agents.values():
        out[agent.name] = {
            "description": agent.description,
            "methods": {
                m.name: {"description": m.description, "inputs": dict(m.inputs)}
                for m in agent.methods.values()
            },
        }
    return state.redacted(out)


# --- questions --------------------------------------------------------------------------


async def _reply(state: ServeState, request: web.Request) -> web.Response:
    """``POST /questions/{id}/answer`` with ``{"answer": …}`` and ``/decline``, both sent as
    JSON (so no web page of another site can post them)."""
    unsupported = media_refusal(request.headers.get("Content-Type"))
    if unsupported is not None:
        return error_reply(415, unsupported)
    key, action = request.match_info["id"], request.match_info["action"]
    board = state.questions
    try:
        if action == "decline":
            board.decline(key)
            return _json({"id": key, "declined": True})
        try:
            body = await read_body_json(await request.read() or b"{}")
        except ValueError as exc:
            return error_reply(400, f'the body must be JSON: {{"answer": …}} ({exc})')
        if not isinstance(body, dict) or "answer" not in body:
            return error_reply(400, 'the body must be a JSON object {"answer": …}')
        problem = board.reply(key, body["answer"])
    except KeyError:
        return error_reply(404, f"no question '{key}' is waiting; GET /questions lists them")
    if problem is not None:
        return error_reply(400, problem)
    return _json({"id": key, "answered": True})


# --- runs -------------------------------------------------------------------------------


async def _run(state: ServeState, request: web.Request) -> web.StreamResponse:
    inputs = await read_inputs(request)
    program, _ = state.holder.snapshot()
    agent, method = method_at(program, request)
    model = model_for(state, program, request)
    session = request.query.get("session")
    if not wants_events(request):
        run = await start_run(state, agent, method.name, inputs, model=model, session=session)
        record = await run.record()
        return web.Response(
            status=status_of(record), text=record.to_json(), content_type="application/json"
        )
    events: asyncio.Queue[JSONObject] = asyncio.Queue()
    run = await start_run(
        state, agent, method.name, inputs, model=model, on_event=events.put_nowait, session=session
    )
    return await _stream_run(request, run, events, state.secrets_of_run(agent))


async def _stream_run(
    request: web.Request,
    run: ServedRun,
    events: asyncio.Queue[JSONObject],
    secrets: frozenset[str],
) -> web.StreamResponse:
    """The run's events as server-sent events as they come, then ``event: record``.

    A client that goes away stops the stream, never the run (it belongs to the service)."""
    shown = _RedactedEvents(secrets)
    stream = await EventStream.start(request)
    task = run.task
    while True:
        next_event = asyncio.ensure_future(events.get())
        await asyncio.wait({next_event, task}, return_when=asyncio.FIRST_COMPLETED)
        if not next_event.done():
            next_event.cancel()
            break
        if not await _send_all(stream, shown.take(next_event.result())):
            return await stream.end()
    while not events.empty():
        if not await _send_all(stream, shown.take(events.get_nowait())):
            return await stream.end()
    record = await run.record()
    if await _send_all(stream, shown.flush()):
        await stream.send("record", redact(record.to_json(), shown.secrets))
    return await stream.end()


async def _send_all(stream: EventStream, events: list[tuple[str, str]]) -> bool:
    for kind, data in events:
        if not await stream.send(kind, data):
            return False
    return True


class _RedactedEvents:
    """A run's events as ``(type, JSON text)`` to send, secrets redacted.

    The model's text comes in pieces, and a secret may be split across two: ``text`` and
    ``thinking`` pieces pass through a ``StreamRedactor`` each, which holds back an end that
    could begin a secret until the next piece (or any other event) settles it.
    """

    def __init__(self, secrets: frozenset[str]) -> None:
        self.secrets = secrets
        self._pieces = {kind: StreamRedactor(secrets) for kind in ("text", "thinking")}

    def take(self, event: JSONObject) -> list[tuple[str, str]]:
        kind = str(event.get("type", "message"))
        text = event.get("text")
        redactor = self._pieces.get(kind)
        if redactor is not None and isinstance(text, str):
            shown = redactor.feed(text)
            return [(kind, _dumps({**event, "text": shown}))] if shown else []
        out = self.flush()
        data = redact(json.dumps(event, ensure_ascii=False, default=repr), self.secrets)
        return [*out, (kind, data)]

    def flush(self) -> list[tuple[str, str]]:
        """What the redactors hold back, as events (before another kind of event, or the end)."""
        out: list[tuple[str, str]] = []
        for kind, redactor in self._pieces.items():
            held = redactor.flush()
            if held:
                out.append((kind, _dumps({"type": kind, "text": held})))
        return out


# --- reload notices ---------------------------------------------------------------------


def reload_notice(event: ReloadEvent) -> JSONObject:
    """What ``/events`` says of a reload (before redaction)."""
    return {
        "status": event.status,
        "version": event.version,
        "previous": event.previous,
        "diagnostics": [str(d) for d in event.diagnostics],
        "changed": [p.name for p in event.changed],
        "compile_s": round(event.compile_s, 4),
        "message": describe_reload(event),
    }


async def _events(state: ServeState, request: web.Request) -> web.StreamResponse:
    """Reload notices as they happen, after one ``event: version`` saying what serves now;
    a ``: keep-alive`` comment every ``KEEPALIVE_S`` of silence; ends on shutdown."""
    notices: asyncio.Queue[ReloadEvent] = asyncio.Queue()
    state.holder.listeners.append(notices.put_nowait)
    try:
        stream = await EventStream.start(request)
        first = {"version": _version(state)["version"], "reload": _reload_report(state)}
        alive = await stream.send("version", _dumps(first))
        stopping = asyncio.ensure_future(state.stopping.wait())
        try:
            while alive and not state.stopping.is_set():
                notice = asyncio.ensure_future(notices.get())
                try:
                    async with state.deadline(KEEPALIVE_S):
                        await asyncio.wait({notice, stopping}, return_when=asyncio.FIRST_COMPLETED)
                except TimeoutError:
                    pass
                if notice.done():
                    data = _dumps(state.redacted(reload_notice(notice.result())))
                    alive = await stream.send("reload", data)
                else:
                    notice.cancel()
                    if not state.stopping.is_set():
                        alive = await stream.comment()
        finally:
            stopping.cancel()
        return await stream.end()
    finally:
        state.holder.listeners.remove(notices.put_nowait)


async def _one_run(state: ServeState, request: web.Request) -> web.Response:
    run_id = request.match_info["id"]
    found = state.history.get(run_id)
    if found is None:
        return error_reply(404, f"no run '{run_id}' is known; GET /runs lists them")
    return _json(found)
