"""What every route that runs a method shares: ``POST /run`` (JSON and server-sent events),
``/v1/chat/completions`` (JSON and streamed), and the web page's Render.

``start_run`` is the one way a route starts a run: refused with 503 once the server is
shutting down, started on the ``RunService`` with a session trace, and, when it ends
(whether or not its client is still there), kept in the history with its trace and
written to the server's log as one line. A refusal is raised as ``Refused``: the app's
error middleware answers it as ``{"error": ...}`` (in OpenAI's shape under ``/v1/``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from ..errors import UsageError
from ..json_types import JSONValue
from ..run.record import RunRecord
from ..run.sessions import SessionMismatchError, SessionStoreBusy, user_text
from ..runtime.trace import SessionTrace
from .app import Refused, ServeState
from .guard import media_refusal, read_json

if TYPE_CHECKING:
    from ..compile.program import Agent, Method, Program
    from ..run.events import Observer
    from ..runtimes.protocol import Message

__all__ = [
    "PARSE_IN_WORKER",
    "ServedRun",
    "method_at",
    "model_for",
    "read_body_json",
    "read_inputs",
    "start_run",
    "status_of",
]


def status_of(record: RunRecord) -> int:
    """A run's HTTP status: 200 ok, 400 bad inputs, 422 inputs the method's template
    cannot render (``{{ 10 / n }}`` given n = 0: the request's inputs decide it, so it is
    no server error), 502 the model call failed, 503 interrupted by shutdown, 500 any other
    failure."""
    if record.status == "ok":
        return 200
    if record.status == "interrupted":
        return 503
    if record.exit_code == 2:
        return 400
    kind = (record.error or {}).get("type")
    if kind == "TemplateRenderError":
        return 422
    return 502 if kind == "LLMError" else 500


def method_at(program: Program, request: web.Request) -> tuple[Agent, Method]:
    """The agent and method the path names (``{agent}``, ``{method}``); 404 otherwise."""
    name, method = request.match_info["agent"], request.match_info["method"]
    agent = program.agents.get(name)
    if agent is None or method not in agent.methods:
        what = f"agent '{name}'" if agent is None else f"method '{method}' of '{name}'"
        raise Refused(404, f"no {what}; GET /agents lists them")
    return agent, agent.methods[method]


#: Bodies longer than this are checked and parsed in a worker thread: one near ``MAX_BODY``
#: (a file input at its cap) took 0.15 s of the event loop, every other client waiting.
#: The thread holds the interpreter through each step (the JSON decoder's, the longest,
#: about 40 ms at the cap), and the loop runs between them. A shorter body costs less than
#: the hop to the thread (about 0.1 ms at 1 MiB against 5 ms).
PARSE_IN_WORKER = 1 << 20


async def read_body_json(data: bytes) -> JSONValue:
    """``read_json`` of a request's body; past ``PARSE_IN_WORKER`` bytes, in a worker thread."""
    if len(data) <= PARSE_IN_WORKER:
        return read_json(data)
    return await asyncio.to_thread(read_json, data)


async def read_inputs(request: web.Request) -> dict[str, JSONValue]:
    """The request's body: a JSON object of input names to values (none: ``{}``); 415 or
    400 saying what to send otherwise."""
    refusal = media_refusal(request.headers.get("Content-Type"))
    if refusal is not None:
        raise Refused(415, refusal)
    try:
        inputs = await read_body_json(await request.read() or b"{}")
    except ValueError as exc:
        raise Refused(400, f"the body must be a JSON object of inputs ({exc})") from None
    if not isinstance(inputs, dict):
        raise Refused(400, "the body must be a JSON object of input names to values")
    return inputs


def model_for(state: ServeState, program: Program, request: web.Request) -> str | None:
    """The model a run uses: the last ``?model=``, else the server's ``--model``. Unless
    ``--allow-model-override``, ``?model=`` may only name a model the project uses (403)."""
    if "model" not in request.query:
        return state.model
    model = request.query.getall("model")[-1]
    if not state.limits.allow_model_override:
        allowed = _models(state, program)
        if model not in allowed:
            raise Refused(
                403,
                "?model= may only name a model this project uses "
                f"({', '.join(sorted(allowed)) or 'none'}); "
                "start serve with --allow-model-override to allow any",
            )
    return model


def _models(state: ServeState, program: Program) -> set[str]:
    """The models the project's agents and methods name, and the server's ``--model``."""
    names = {state.model} if state.model else set()
    for agent in program.agents.values():
        names.update(m.options.model for m in agent.methods.values() if m.options.model)
        if agent.model:
            names.add(agent.model)
    return names


@dataclass(frozen=True, slots=True)
class ServedRun:
    """A run a route started: its task belongs to the ``RunService``."""

    task: asyncio.Task[RunRecord]

    async def record(self) -> RunRecord:
        """The run's record once it ends. Shielded: the service finishes or interrupts the
        run (at shutdown); a client that goes away must not cancel it half-way."""
        return await asyncio.shield(self.task)


async def start_run(
    state: ServeState,
    agent: Agent,
    method: str,
    inputs: Mapping[str, JSONValue],
    *,
    model: str | None,
    on_event: Observer | None = None,
    route: str = "",
    session: str | None = None,
) -> ServedRun:
    """Start a run of ``agent``'s ``method`` for a route (its log line ends with ``route``,
    when given); 503 once the server is shutting down. With ``session`` (``?session=NAME``)
    the run is that chat session's next turn (``run.sessions``): sent its history, and kept
    in it when it ends ok; 400 for a bad name, 409 for a session of another method, 503 for
    a store another process keeps locked. (The store is used in a worker thread.)"""
    if state.service.closing:
        raise Refused(503, "the server is shutting down")
    history: tuple[Message, ...] = ()
    turn = None
    if session is not None:
        try:
            history = await state.sessions.async_begin_turn(session, agent.name, method)
        except SessionMismatchError as exc:
            raise Refused(409, str(exc)) from None
        except SessionStoreBusy as exc:
            raise Refused(503, str(exc)) from None
        except UsageError as exc:  # a bad name; a store that cannot be opened
            raise Refused(400, str(exc)) from None
        turn = (session, user_text(agent.methods[method], inputs))
        if state.service.closing:  # it began to while the store was read
            raise Refused(503, "the server is shutting down")
    trace = SessionTrace()
    task = state.service.start(
        agent.name, method, inputs, model=model, trace=trace, on_event=on_event, history=history
    )
    task.add_done_callback(partial(_finished, state, trace, route))
    if turn is None:
        return ServedRun(task)
    return ServedRun(asyncio.ensure_future(_keep_turn(state, task, *turn)))


async def _keep_turn(
    state: ServeState, task: asyncio.Task[RunRecord], session: str, user: str
) -> RunRecord:
    """The run's record once its turn is kept in ``session`` (when it ended ok): its client
    gets the reply after the session holds it."""
    record = await asyncio.shield(task)
    try:
        await state.sessions.async_end_turn(session, user, record)
    except UsageError as exc:  # the store cannot be written: said, the run stands
        state.say(f"session {session}: {exc}", record.secrets)
    return record


def _finished(
    state: ServeState, trace: SessionTrace, route: str, task: asyncio.Task[RunRecord]
) -> None:
    """Keep the ended run in the history and log it. (Run before the route's handler
    resumes: its record is in ``/runs`` when its client gets the reply.)"""
    if task.cancelled() or task.exception() is not None:
        return  # execute_run always gives a record; nothing to keep otherwise
    record = task.result()
    state.history.add(record, trace)
    state.say(
        f"{status_of(record)} {record.agent}.{record.method} {record.status} "
        f"{record.elapsed_s * 1000:.0f} ms version {record.version.hash}"
        + (f" ({route})" if route else ""),
        record.secrets,
    )
