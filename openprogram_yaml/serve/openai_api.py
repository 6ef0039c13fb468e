"""The OpenAI-compatible endpoint: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any client of the Chat Completions API (the ``openai`` SDKs, LangChain, Open WebUI, curl)
can call the project's agents. Each method is a model named ``agent.method``; when the
project has one agent, also by its bare ``method`` name.

What a request means here:

- The **last user message** is the method's input. A method with one input gets the text
  as it is (one input of another type than string: the text read as JSON); a method with
  several inputs takes the text as a JSON object of inputs; a method without inputs ignores
  it. Content is a string or a list of parts: text parts (joined by newlines), and files
  for the method's file inputs (``runtime.content``): ``image_url`` with a data URL,
  ``input_audio`` (base64 ``wav`` or ``mp3``), ``file`` with ``file_data`` (a data URL, or
  base64 with a ``filename``). Each file goes to the first file input, in the order the
  method declares them, that takes its type and has none yet; the text then fills the
  other inputs. A file no input takes, an image given by an ``http(s)`` URL (this server
  fetches nothing) or a ``file_id`` (there is no Files API here) is a 400.
- **System and earlier messages are ignored**: the method's own instructions and prompt
  are the prompt, so a method answers the same whoever calls it. A conversation belongs to
  the agent (its tools, its ``choices``), not to the client.
- Sampling parameters (``temperature``, ``max_tokens``, ``tools`` …) are ignored: the YAML
  decides them. The fields read (``model``, ``messages``, ``stream``, ``stream_options``,
  ``n``) must have their types, and ``n`` must be 1.
- The message content is the run's output: text as it is, any other JSON value (a response
  schema's object, a ``choices`` value) as compact JSON.

Runs go through the server's ``RunService`` like ``POST /run``: recorded, in the history,
secrets redacted. ``stream: true`` sends Chat Completions chunks as server-sent events:
the role, the method's text as the model writes it, a final chunk with ``finish_reason``,
a usage chunk when ``stream_options.include_usage``, then ``[DONE]``. A method whose output
is JSON sends that JSON whole at the end, so the streamed content always joins up to the
non-streamed one; for a text method it does too unless text already sent turns out not to
be the answer (the model wrote before calling a tool, or an attempt failed half-way and was
retried): a stream cannot take back what it sent. A run that fails mid-stream ends with an
``{"error": …}`` event, as OpenAI's own streams do.

Errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``: 400 bad
request, 404 unknown model (``model_not_found``), 422 inputs the method's template cannot
render, 502 the model call failed, 500 any other failed run, 503 shutting down.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote

from aiohttp import web

from ..json_types import JSONObject, JSONValue
from ..redaction import StreamRedactor, redact
from ..run.record import RunRecord
from ..runtime.content import (
    FORMAT_MEDIA,
    MediaError,
    accepts,
    data_url_type,
    media_types,
    media_value,
)
from ..spec.suggest import close_matches
from .guard import media_refusal, read_json, shown
from .served_run import PARSE_IN_WORKER, read_body_json, start_run, status_of
from .sse import EventStream

if TYPE_CHECKING:
    from ..compile.program import Method, Program
    from .app import ServeState

__all__ = [
    "ChatRequest",
    "OpenAIError",
    "chat_completion",
    "chunk",
    "content_of",
    "method_inputs",
    "model_table",
    "models_list",
    "openai_errors",
    "parse_chat_request",
    "read_method_inputs",
    "record_error",
    "routes",
    "usage_of",
]

OWNER = "openprogram"

_T = TypeVar("_T")


class OpenAIError(Exception):
    """An error answered in OpenAI's shape, with its HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> JSONObject:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


# --- models ------------------------------------------------------------------------------


def model_table(program: Program) -> dict[str, Method]:
    """Every model name the endpoint answers to, and the method it runs."""
    table: dict[str, Method] = {}
    for agent in program.agents.values():
        for method in agent.methods.values():
            table[f"{agent.name}.{method.name}"] = method
    if len(program.agents) == 1:
        [agent] = program.agents.values()
        for method in agent.methods.values():
            table.setdefault(method.name, method)
    return table


def models_list(program: Program, created: int) -> JSONObject:
    """The ``GET /v1/models`` body: each method as a model, with its description."""
    data: list[JSONValue] = []
    for name, method in model_table(program).items():
        model: JSONObject = {"id": name, "object": "model", "created": created, "owned_by": OWNER}
        if method.description:
            model["description"] = method.description
        data.append(model)
    return {"object": "list", "data": data}


def find_method(program: Program, name: str) -> Method:
    """The method model ``name`` runs; a 404 ``model_not_found`` naming the nearest ones."""
    # Looked up directly: building every name is for a miss (1,000 methods: 0.1 ms).
    agent_name, dot, method_name = name.rpartition(".")
    if not dot and len(program.agents) == 1:  # a bare method name (not ".method")
        [agent_name] = program.agents
    agent = program.agents.get(agent_name)
    if agent is not None and method_name in agent.methods:
        return agent.methods[method_name]
    table = model_table(program)
    method = table.get(name)
    if method is not None:
        return method
    # (A name far longer than any model's is not compared: a 27 MB one held the loop 3 s.)
    near = close_matches(name, table, n=3, cutoff=0.75)
    hint = f"did you mean {', '.join(repr(n) for n in near)}? " if near else ""
    raise OpenAIError(
        404,
        f"The model '{shown(name)}' does not exist: {hint}GET /v1/models lists the "
        "models (one per agent method, named agent.method).",
        code="model_not_found",
        param="model",
    )


# --- the request -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """What this endpoint reads of a Chat Completions request body."""

    model: str
    #: The text of the last user message.
    text: str
    stream: bool = False
    include_usage: bool = False
    #: The files of the last user message, as checked data URLs, with where each was.
    files: tuple[tuple[str, str], ...] = ()


def _bad(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def parse_chat_request(body: object) -> ChatRequest:
    """Read a request body; a 400 saying what is wrong with it. Unknown fields are ignored."""
    if not isinstance(body, dict):
        raise _bad("The body must be a JSON object (a Chat Completions request).")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' must be a string naming a method (GET /v1/models).", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array of messages.", "messages")
    last_user: int | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a string 'role'.", "messages")
        if message["role"] == "user":
            last_user = i
    if last_user is None:
        raise _bad("'messages' must hold a user message: its text is the method's input.")
    text, files = _content(messages[last_user].get("content"), f"messages[{last_user}].content")
    stream = _optional(body, "stream", bool) or False
    options = _optional(body, "stream_options", dict) or {}
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool | None):
        raise _bad("'stream_options.include_usage' must be a boolean.", "stream_options")
    n = _optional(body, "n", int)
    if n is not None and n != 1:
        raise _bad("'n' must be 1: a method gives one answer per run.", "n")
    return ChatRequest(model, text, stream, bool(include_usage), files)


def _optional(body: Mapping[str, object], name: str, kind: type[_T]) -> _T | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        what = {bool: "a boolean", dict: "an object", int: "an integer"}.get(kind, kind.__name__)
        raise _bad(f"'{name}' must be {what}.", name)
    return value


def _content(content: object, where: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A message's text (a string, or its text parts joined by newlines) and its files as
    checked data URLs, each with where it was."""
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or an array of content parts.")
    texts: list[str] = []
    files: list[tuple[str, str]] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or not isinstance(kind, str):
            raise _bad(f"{at} must be a content part with a 'type'.")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{at}.text must be a string.")
            texts.append(text)
            continue
        value = _file_part(part, kind, at)
        try:
            files.append((media_value(value, FORMAT_MEDIA["file"], at), at))
        except MediaError as exc:
            raise _bad(f"{exc}.") from None
    return "\n".join(texts), tuple(files)


#: ``input_audio`` formats and their media types.
_AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _file_part(part: Mapping[str, object], kind: str, at: str) -> str:
    """A file part's data: a data URL, or base64 text (``media_value`` checks it)."""
    body = part.get(kind)
    if kind not in ("image_url", "input_audio", "file") or not isinstance(body, dict):
        known = "text, image_url, input_audio or file"
        got = shown(kind) if kind not in ("image_url", "input_audio", "file") else kind
        raise _bad(f"{at} must be a content part of type {known} with its object (got '{got}').")
    if kind == "image_url":
        url = body.get("url")
        if not isinstance(url, str):
            raise _bad(f"{at}.image_url.url must be a string.")
        if not url.startswith("data:"):
            raise _bad(
                f"{at}.image_url.url must be a data URL (data:image/png;base64,…): this server "
                "fetches no image from the web."
            )
        return url
    if kind == "input_audio":
        data, audio = body.get("data"), body.get("format")
        if not isinstance(data, str) or not isinstance(audio, str) or audio not in _AUDIO_FORMATS:
            raise _bad(f"{at}.input_audio must hold base64 'data' and a 'format' (wav or mp3).")
        return f"data:{_AUDIO_FORMATS[audio]};base64,{data}"
    data, filename = body.get("file_data"), body.get("filename")
    if not isinstance(data, str):
        why = "there is no Files API here" if "file_id" in body else "it is missing"
        raise _bad(f"{at}.file.file_data must hold the file (a data URL or base64): {why}.")
    if data.startswith("data:") or not isinstance(filename, str):
        return data
    mime = mimetypes.guess_type(filename)[0]
    return f"data:{mime};name={quote(filename, safe='')};base64,{data}" if mime else data


def method_inputs(
    method: Method, text: str, files: Sequence[tuple[str, str]] = ()
) -> dict[str, JSONValue]:
    """The inputs the last user message's ``text`` and ``files`` give ``method`` (see the
    module's doc).

    The run still checks them against the method's inputs schema.
    """
    inputs = _file_inputs(method, files) if files else {}
    names = list(method.inputs)
    if files:  # the text fills the inputs other than files
        names = [name for name in names if media_types(method.inputs[name]) is None]
    if not names:
        return inputs
    if len(names) == 1:
        schema = method.inputs[names[0]]
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        if kind in (None, "string"):
            return {**inputs, names[0]: text}
        try:
            return {**inputs, names[0]: read_json(text)}
        except ValueError:
            return {**inputs, names[0]: text}  # the inputs schema says what is wrong with it
    example = ", ".join(f'"{n}": …' for n in names)
    try:
        parsed = read_json(text)
    except ValueError as exc:
        raise _bad(
            f"Model '{method.agent}.{method.name}' takes inputs {', '.join(names)}: the last "
            f"user message must be a JSON object {{{example}}} ({exc})."
        ) from None
    if not isinstance(parsed, dict):
        raise _bad(
            f"Model '{method.agent}.{method.name}' takes inputs {', '.join(names)}: the last "
            f"user message must be a JSON object {{{example}}}."
        )
    return {**parsed, **inputs}


async def read_method_inputs(
    method: Method, text: str, files: Sequence[tuple[str, str]] = ()
) -> dict[str, JSONValue]:
    """``method_inputs``; for a ``text`` past ``PARSE_IN_WORKER`` characters, in a worker
    thread, as the body it came in was (``read_body_json``): a JSON object of 23 MiB in the
    last user message held the event loop 0.24 s, every other client waiting."""
    if len(text) <= PARSE_IN_WORKER:
        return method_inputs(method, text, files)
    return await asyncio.to_thread(method_inputs, method, text, files)


def _file_inputs(method: Method, files: Sequence[tuple[str, str]]) -> dict[str, JSONValue]:
    """Each file given to the first file input of ``method`` that takes its type and has
    none yet; a 400 for a file none takes."""
    declared = {
        name: accepted
        for name, schema in method.inputs.items()
        if (accepted := media_types(schema)) is not None
    }
    open_inputs = dict(declared)
    given: dict[str, JSONValue] = {}
    for data_url, at in files:
        mime = data_url_type(data_url)
        name = next((n for n, accepted in open_inputs.items() if accepts(accepted, mime)), None)
        if name is None:
            takes = "; ".join(f"{n} takes {', '.join(a)}" for n, a in open_inputs.items())
            why = takes or "each of its file inputs has a file already"
            raise _bad(
                f"{at}: model '{method.agent}.{method.name}' cannot take this {mime} file: "
                + (why if declared else "it takes no file")
                + ".",
                "messages",
            )
        given[name] = data_url
        del open_inputs[name]
    return given


# --- the response ------------------------------------------------------------------------


def content_of(output: JSONValue) -> str:
    """A run's output as message content: text as it is, any other value as compact JSON."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, separators=(",", ":"))


def usage_of(usage: Mapping[str, int] | None) -> JSONObject:
    """A record's usage in Chat Completions terms (cached input tokens included)."""
    usage = usage or {}
    prompt, completion = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    out: JSONObject = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }
    if usage.get("cache_read"):
        out["prompt_tokens_details"] = {"cached_tokens": usage["cache_read"]}
    return out


def chat_completion(record: RunRecord, model: str, created: int) -> JSONObject:
    """The ``chat.completion`` object of a run that ended well (not yet redacted)."""
    return {
        "id": f"chatcmpl-{record.id}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": record.version.hash,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content_of(record.output),
                    "refusal": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage_of(record.usage),
    }


def chunk(
    id: str,
    model: str,
    created: int,
    delta: JSONObject | None,
    *,
    finish_reason: str | None = None,
    fingerprint: str | None = None,
    usage: JSONObject | None = None,
) -> JSONObject:
    """One ``chat.completion.chunk``; ``delta`` None is the usage chunk (no choices)."""
    out: JSONObject = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None or delta is None:
        out["usage"] = usage
    return out


def record_error(record: RunRecord, secrets: Iterable[str] = ()) -> OpenAIError:
    """A failed run as an OpenAI error with ``POST /run``'s status (``status_of``); the
    message is the record's, its secrets and ``secrets`` redacted."""
    error = record.error or {}
    kind = str(error.get("type") or "Error")
    message = redact(f"{kind}: {error.get('message')}", record.secrets | set(secrets))
    status = status_of(record)
    if status == 503:
        return OpenAIError(503, message, type="server_error", code="interrupted")
    if status in (400, 422):
        return OpenAIError(status, message, code="invalid_inputs")
    return OpenAIError(status, message, type="server_error", code=kind)


# --- the routes --------------------------------------------------------------------------


def routes(state: ServeState) -> list[web.RouteDef]:
    """The endpoint's routes on ``state``'s program and run service."""

    async def list_models(request: web.Request) -> web.Response:
        program, _ = state.holder.snapshot()
        # A description may read ``${env:…}``: redacted as ``/agents`` is.
        return web.json_response(state.redacted(models_list(program, _created(state))))

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        try:
            return await _chat(state, request)
        except OpenAIError as exc:
            return _error_response(exc)

    return [
        web.get("/v1/models", list_models),
        web.post("/v1/chat/completions", chat_completions),
    ]


#: The ``type`` of an error by its status, as OpenAI's API names them.
_ERROR_TYPES = {401: "invalid_request_error", 403: "invalid_request_error", 408: "timeout"}
_ERROR_CODES = {401: "invalid_api_key", 403: "forbidden", 404: "unknown_url", 408: "timeout"}


@web.middleware
async def openai_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The server's own refusals of a ``/v1/`` request (no token, a foreign ``Origin``, an
    unknown route …: ``{"error": "..."}``) in OpenAI's error shape, which its clients read."""
    response = await handler(request)
    if (
        not request.path.startswith("/v1/")
        or response.status < 400
        or response.prepared
        or not isinstance(response, web.Response)
        or response.content_type != "application/json"
        or not isinstance(response.body, bytes)
    ):
        return response
    try:
        body = json.loads(response.body)
    except ValueError:
        return response
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return response
    status = response.status
    error = OpenAIError(
        status,
        body["error"],
        type=_ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        code=_ERROR_CODES.get(status),
    )
    response.body = json.dumps(error.body(), ensure_ascii=False).encode("utf-8")
    return response


def _created(state: ServeState) -> int:
    """When the serving version was loaded: the "created" of every model."""
    checked = state.holder.checked_at
    return int(checked.timestamp()) if checked is not None else int(time.time())


def _error_response(error: OpenAIError) -> web.Response:
    return web.json_response(error.body(), status=error.status)


async def _read_body(request: web.Request) -> object:
    refusal = media_refusal(request.headers.get("Content-Type"))
    if refusal is not None:
        raise OpenAIError(415, refusal.replace("the inputs", "the request"))
    try:
        return await read_body_json(await request.read())
    except ValueError as exc:
        raise _bad(f"The body must be a JSON object ({exc}).") from None


async def _chat(state: ServeState, request: web.Request) -> web.StreamResponse:
    chat = parse_chat_request(await _read_body(request))
    program, stamp = state.holder.snapshot()
    method = find_method(program, chat.model)
    inputs = await read_method_inputs(method, chat.text, chat.files)
    agent = program.agents[method.agent]
    created = int(time.time())
    if not chat.stream:
        run = await start_run(state, agent, method.name, inputs, model=state.model, route="/v1")
        record = await run.record()
        # The run's own secrets and the token: every agent's would cost 3.4 ms a request
        # at 500 agents.
        secrets = record.secrets | state.secrets_of_server()
        if record.status != "ok":
            return _error_response(record_error(record, secrets))
        body = json.dumps(chat_completion(record, chat.model, created), ensure_ascii=False)
        return web.Response(text=redact(body, secrets), content_type="application/json")
    events: asyncio.Queue[JSONObject | None] = asyncio.Queue()
    run = await start_run(
        state,
        agent,
        method.name,
        inputs,
        model=state.model,
        on_event=events.put_nowait,
        route="/v1",
    )
    run.task.add_done_callback(lambda _: events.put_nowait(None))
    secrets = state.secrets_of_run(agent)
    stream = _ChatStream(program, method, secrets)
    sse = await EventStream.start(request)
    completion = f"chatcmpl-{uuid.uuid4().hex[:16]}"

    async def send(
        delta: JSONObject | None, finish: str | None = None, usage: JSONObject | None = None
    ) -> bool:
        data = chunk(
            completion,
            chat.model,
            created,
            delta,
            finish_reason=finish,
            fingerprint=stamp.hash,
            usage=usage,
        )
        return await sse.send_data(json.dumps(data, ensure_ascii=False))

    if not await send({"role": "assistant", "content": ""}):
        return await sse.end()
    while (event := await events.get()) is not None:
        text = stream.take(event)
        if text and not await send({"content": text}):
            return await sse.end()  # the client left; the run goes on and is recorded
    record = await run.record()
    if record.status != "ok":
        await sse.send_data(json.dumps(record_error(record, secrets).body(), ensure_ascii=False))
        return await sse.end()
    rest = stream.finish(content_of(record.output))
    sent = not rest or await send({"content": rest})
    sent = sent and await send({}, finish="stop")
    if sent and chat.include_usage:
        sent = await send(None, usage=usage_of(record.usage))
    if sent:
        await sse.send_data("[DONE]")
    return await sse.end()


class _ChatStream:
    """Turns a run's events into the content a stream sends, redacted as it goes.

    Only the text of a method whose answer is its text (no response schema, no
    ``choices``) is sent as it comes; a JSON answer is sent whole by ``finish``. What
    happens between a tool call and its result (a method called as a tool runs and streams
    too) belongs to the tool, never to the answer.
    """

    def __init__(self, program: Program, method: Method, secrets: Iterable[str]) -> None:
        self._program = program
        self._live = _answers_in_text(method)
        self._sent = ""
        self._redactor = StreamRedactor(secrets)
        #: The tool calls begun and not yet answered.
        self._in_tools: set[object] = set()

    def take(self, event: JSONObject) -> str:
        """The content to send now for ``event``."""
        kind = event.get("type")
        if kind == "tool_use":
            self._in_tools.add(event.get("id"))
        elif kind == "tool_result":
            self._in_tools.discard(event.get("id"))
        elif self._in_tools:
            return ""
        elif kind == "method":
            agent = self._program.agents.get(str(event.get("agent")))
            method = agent.methods.get(str(event.get("method"))) if agent else None
            self._live = method is not None and _answers_in_text(method)
        elif kind == "text" and self._live:
            text = event.get("text")
            if isinstance(text, str):
                self._sent += text
                return self._redactor.feed(text)
        return ""

    def finish(self, content: str) -> str:
        """The rest of the answer ``content`` once the run has ended well."""
        rest = content[len(self._sent) :] if content.startswith(self._sent) else ""
        return self._redactor.feed(rest) + self._redactor.flush()


def _answers_in_text(method: Method) -> bool:
    return method.response_format is None and not method.choices
