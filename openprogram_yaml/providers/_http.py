"""What every HTTP provider shares: its settings, its pooled client, and the turn itself.

``HTTPRuntime.run_turn`` is the one template of a turn: check what is known before any
request (closed, no model, no key), build the body, POST it, read the reply whole or as
server-sent events, classify any failure (``runtimes.failures``), redact secrets from
messages and stamp the metadata. Every attempt is bounded: a read timeout between bytes, a
cap on the reply's size, no redirects followed. Where and how a provider is reached (base
URL, key and its variable, headers, timeouts, reply cap, pool) is one ``ProviderSettings``.
Adding a provider means writing its wire format only::

    class EchoRuntime(HTTPRuntime):
        runtime_id, path = "echo", "/v1/generate"
        default_base_url, default_key_env = "https://api.echo.example", "ECHO_API_KEY"

        def auth_headers(self, key):                  # how the key travels
            return {"authorization": f"Bearer {key}"} if key else {}
        def build_body(self, model, prompt, system_prompt, options, stream):
            return {"model": model, "input": prompt, "stream": stream}
        def parse_reply(self, data):                  # a whole JSON reply
            return RuntimeResult(content=shape.str_at(data, "output"))
        def stream_assembler(self, on_delta):         # its server-sent events
            return EchoAssembler(self.provider, on_delta)

Options of its own go in its ``__init__``, which passes ``**settings:
Unpack[ProviderOptions]`` (the options every HTTP runtime takes) on to ``HTTPRuntime``.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import math
import mimetypes
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, Unpack
from urllib.parse import urlsplit

from .._file_reads import MAX_MEDIA_BYTES, FileRefused, read_regular_file
from ..errors import ErrorReason
from ..json_types import parse_json
from ..redaction import redact
from ..runtimes.failures import failure_from_exception, failure_from_redirect, failure_from_status
from ..runtimes.protocol import (
    DeltaCallback,
    Message,
    RuntimeConfig,
    RuntimeDelta,
    RuntimeResult,
    TurnFailure,
)
from ..runtimes.wrapping import stream_via_run_turn
from ._shape import BadReply, ReplyTooLarge, bad_reply_failure
from .http_client import (
    ClientPool,
    ClientSettings,
    HTTPClient,
    Reply,
    Timeouts,
    iter_lines,
    make_client,
    request_timeout,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_READ_TIMEOUT_S",
    "HTTPRuntime",
    "ProviderOptions",
    "ProviderSettings",
    "SSEEvent",
    "StreamAssembler",
    "Unsendable",
    "failed",
    "image_source",
    "is_local_url",
    "iter_sse",
    "resolve_read_timeout",
]

#: Seconds a server may stay silent (before its first byte or between two) per attempt.
DEFAULT_READ_TIMEOUT_S = 120.0
#: The largest reply body read, streamed or not (10 MiB).
DEFAULT_MAX_REPLY_BYTES = 10 * 1024 * 1024
#: Connections a runtime opens to its server at most (made on demand, one per request in
#: flight). 1,000, as the openai SDK, pydantic-ai and langchain: 1,000 concurrent runs at
#: 100 ms latency took 1.04x bare aiohttp's time with it, 1.54x with 200 (the rest queued
#: for a connection); benchmarks/concurrency.py. A batch above it sets ``max_connections``.
DEFAULT_MAX_CONNECTIONS = 1000


#: Request bodies as compact UTF-8 JSON (one encoder: ``json.dumps`` with options builds
#: a new one for every call). No check for cycles (a third of the encoding time): a body
#: holding one (a schema that contains itself) still fails its turn before anything is
#: sent, with ``RecursionError`` instead of ``ValueError``.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def resolve_read_timeout(value: float | None) -> float:
    """``value``, else ``OPENPROGRAM_READ_TIMEOUT_S``, else 120 seconds; always finite > 0.

    Without a bound, a server that accepts a connection and never answers holds a run for
    as long as the exec allows, which with no ``timeout_s`` is forever.
    """
    name = "timeout_s"
    if value is None:
        raw = os.environ.get("OPENPROGRAM_READ_TIMEOUT_S", "").strip()
        if not raw:
            return DEFAULT_READ_TIMEOUT_S
        name = "OPENPROGRAM_READ_TIMEOUT_S"
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a number > 0 (seconds), not {value!r}")
    return float(value)


def _reply_cap(value: int | None) -> int:
    if value is None:
        return DEFAULT_MAX_REPLY_BYTES
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_reply_bytes must be an integer > 0, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Where and how one provider configuration is reached: everything but the wire format.

    ``api_key`` and ``headers`` may hold secrets: they are left out of ``repr``.
    """

    provider: str
    base_url: str
    api_key_env: str = ""
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Seconds the server may stay silent per attempt, before its first byte or between two.
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    connect_timeout_s: float = 10.0
    #: The largest reply body read, streamed or not.
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def client(self, headers: Mapping[str, str]) -> ClientSettings:
        """The pooled client's settings, sending ``headers`` (auth included) on every request."""
        return ClientSettings(
            base_url=self.base_url,
            headers=headers,
            timeout_s=self.read_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            max_connections=self.max_connections,
            max_keepalive_connections=min(self.max_connections, 100),
        )


class Unsendable(ValueError):
    """Content or an option the wire format cannot carry. A final ``invalid_request`` before
    any request is sent: sending the rest without it would drop it silently."""


class ProviderOptions(TypedDict, total=False):
    """The keyword options every HTTP runtime takes (``HTTPRuntime`` says what each means);
    resolved into one ``ProviderSettings``."""

    base_url: str | None
    api_key: str | None
    api_key_env: str | None
    headers: Mapping[str, str] | None
    timeout_s: float | None
    connect_timeout_s: float
    max_connections: int
    provider: str | None
    model: str | None
    transport: httpx.AsyncBaseTransport | None
    max_reply_bytes: int | None


def failed(failure: TurnFailure, **metadata: Any) -> RuntimeResult:
    """A ``RuntimeResult`` that reports ``failure``."""
    return RuntimeResult(error=failure.message, failure=failure, metadata=metadata)


def is_local_url(url: str) -> bool:
    """True for servers on this machine or a private network (Ollama, vLLM, llama.cpp…)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", "host.docker.internal") or host.endswith((".local", ".localhost")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_unspecified


def image_source(block: Mapping[str, Any]) -> tuple[str, str] | str | None:
    """An image block's ``(mime_type, base64 data)``, or its URL, or None if it has neither.

    Blocks carry ``data`` + ``mime_type``, a ``url``, or a ``path`` read from disk (a
    regular file of at most ``MAX_MEDIA_BYTES``, else ``Unsendable``). ``Runtime.exec``
    reads paths itself (``runtime.content``); this serves a turn called directly.
    """
    if block.get("data"):
        return str(block.get("mime_type") or "image/png"), str(block["data"])
    if block.get("url"):
        return str(block["url"])
    path = block.get("path")
    if not path:
        return None
    try:
        raw = read_regular_file(path, limit=MAX_MEDIA_BYTES)
    except FileRefused as exc:
        # A FIFO named as an image would hang the turn; a huge file would be read whole.
        raise Unsendable(f"cannot read the image file {str(path)!r}: {exc.reason}") from None
    data = base64.b64encode(raw).decode("ascii")
    return mimetypes.guess_type(str(path))[0] or "image/png", data


# --- server-sent events ----------------------------------------------------------------


@dataclass(slots=True)
class SSEEvent:
    """One server-sent event: its ``event`` name (default "message") and ``data`` text.

    ``cut`` marks a last event the stream ended in the middle of (no blank line after it).
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    cut: bool = False


async def iter_sse(lines: AsyncIterator[str]) -> AsyncGenerator[SSEEvent, None]:
    """Server-sent events from a stream of lines (line endings already removed).

    Follows the WHATWG rules that matter here: ``data`` lines join with newlines, comments
    (``:``) are skipped, a blank line ends an event, one space after the colon is dropped.
    """
    event = ""
    data: list[str] = []
    event_id: str | None = None
    async for line in lines:
        if not line:
            if data:
                yield SSEEvent(event or "message", "\n".join(data), event_id)
            event, data = "", []
            continue
        if line[0] == ":":
            continue
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            event_id = value
    if data:
        yield SSEEvent(event or "message", "\n".join(data), event_id, cut=True)


# --- the shared shape of an HTTP runtime ------------------------------------------------


class StreamAssembler:
    """Turns a provider's server-sent events into a ``RuntimeResult``, one event at a time."""

    provider: str = ""
    done: bool = False
    failure: TurnFailure | None = None
    on_delta: DeltaCallback

    def whole(self, result: RuntimeResult) -> RuntimeResult:
        """``result``, a whole reply sent where a stream was asked for, after telling
        ``on_delta`` what a stream of it would have: its thinking, text and tool calls."""
        if result.thinking:
            self.on_delta(RuntimeDelta("thinking", result.thinking))
        if result.content:
            self.on_delta(RuntimeDelta("text", result.content))
        for index, call in enumerate(result.tool_calls):
            self.on_delta(
                RuntimeDelta(
                    "tool_call", call.arguments, {"index": index, "id": call.id, "name": call.name}
                )
            )
        return result

    def decode(self, event: SSEEvent) -> dict[str, Any] | None:
        """The event's JSON object; otherwise records the failure and gives None.

        Garbage in a whole event is a malformed reply (final); garbage in an event the
        stream was cut in the middle of is a dropped connection (retried).
        """
        try:
            data = parse_json(event.data)
        except ValueError:
            if event.cut:
                self.failure = TurnFailure(
                    ErrorReason.CONNECTION.value,
                    f"{self.provider}: the stream was cut in the middle of an event",
                    True,
                )
                return None
            problem = "a stream event is not JSON"
        else:
            if isinstance(data, dict):
                return data
            problem = "a stream event is not a JSON object"
        self.failure = TurnFailure(
            ErrorReason.SERVER_ERROR.value, f"{self.provider}: malformed reply: {problem}", False
        )
        return None

    def feed(self, event: SSEEvent) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def finished(self) -> bool:
        """Whether what was read makes a whole turn (even if the stream then just ends)."""
        return self.done

    def result(self) -> RuntimeResult:  # pragma: no cover - interface
        raise NotImplementedError


class HTTPRuntime:
    """One turn over HTTP, the same for every wire format (see the module docstring).

    Options (keyword only, all optional): ``base_url``, ``api_key``, ``api_key_env``,
    ``headers``, ``timeout_s`` (seconds the server may stay silent per attempt, before its
    first byte or between two: else ``OPENPROGRAM_READ_TIMEOUT_S``, else 120),
    ``connect_timeout_s``, ``max_reply_bytes`` (the largest reply read, default 10 MiB),
    ``max_connections``, ``provider`` (the name used in errors and matched as a model-ref
    prefix), ``model`` (used when a turn names none) and ``transport`` (an
    ``httpx.AsyncBaseTransport``, for tests and benchmarks). The key is read from
    ``api_key``, else from the ``api_key_env`` variable on first use; it is only required
    when ``base_url`` is not a local server. Redirects are never followed.
    """

    runtime_id: str = ""
    default_base_url: str = ""
    default_key_env: str = ""
    base_url_env: str = ""
    #: Where requests go, under the base URL.
    path: str = ""
    #: Bare model ids (no "provider:" prefix) this runtime claims in ``supports``.
    bare_model_prefixes: tuple[str, ...] = ()

    def __init__(self, **options: Unpack[ProviderOptions]) -> None:
        unknown = sorted(set(options) - ProviderOptions.__optional_keys__)
        if unknown:
            # Python's own wording, naming the class the user configured, not this base.
            raise TypeError(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                f"{unknown[0]!r}"
            )
        base_url = options.get("base_url")
        if base_url is None and self.base_url_env:
            base_url = os.environ.get(self.base_url_env)
        api_key = options.get("api_key")
        self.settings = ProviderSettings(
            provider=options.get("provider") or self.runtime_id,
            base_url=(base_url or self.default_base_url).rstrip("/"),
            api_key_env=options.get("api_key_env") or self.default_key_env,
            api_key=api_key,
            headers=dict(options.get("headers") or {}),
            read_timeout_s=resolve_read_timeout(options.get("timeout_s")),
            connect_timeout_s=options.get("connect_timeout_s", 10.0),
            max_reply_bytes=_reply_cap(options.get("max_reply_bytes")),
            max_connections=options.get("max_connections", DEFAULT_MAX_CONNECTIONS),
        )
        self.provider = self.settings.provider
        self.model = options.get("model")
        self.config = RuntimeConfig(
            self.runtime_id,
            {
                "provider": self.provider,
                "base_url": self.settings.base_url,
                "api_key_env": self.settings.api_key_env,
            },
        )
        self._api_key = api_key
        # A local server (Ollama, vLLM …) may need no key; decided once, not on every turn.
        # A local server may take no key; a variable the configuration names must be set,
        # or a typo in its name would be found only as the server's 401.
        self._key_required = not is_local_url(self.settings.base_url) or bool(
            options.get("api_key_env")
        )
        self._transport = options.get("transport")
        self._pool: ClientPool[HTTPClient] = ClientPool(self._new_client)
        self._extra_secrets: set[str] = set()

    # --- the wire format: what a provider writes ---------------------------------------

    def auth_headers(self, key: str | None) -> dict[str, str]:  # pragma: no cover
        """The headers that carry ``key`` (and any the API requires on every request)."""
        raise NotImplementedError

    def build_body(
        self,
        model: str,
        prompt: str | Sequence[Message],
        system_prompt: str | None,
        options: Mapping[str, Any],
        stream: bool,
    ) -> dict[str, Any]:  # pragma: no cover
        """The JSON body of one request."""
        raise NotImplementedError

    def parse_reply(self, data: Mapping[str, Any]) -> RuntimeResult | TurnFailure:
        """A whole JSON reply as a result (``shape``'s accessors name what is malformed)."""
        raise NotImplementedError  # pragma: no cover

    def stream_assembler(self, on_delta: DeltaCallback) -> StreamAssembler:  # pragma: no cover
        """A fresh assembler for one streamed reply."""
        raise NotImplementedError

    # --- identity -------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(provider={self.provider!r}, "
            f"base_url={self.settings.base_url!r})"
        )

    def supports(self, model_ref: str | None = None) -> bool:
        """Refs prefixed with this runtime's provider name or id, or known bare model ids."""
        if model_ref is None:
            return True
        prefix, sep, _ = model_ref.partition(":")
        if sep:
            return prefix in (self.provider, self.runtime_id)
        return model_ref.startswith(self.bare_model_prefixes)

    def model_id(self, model_ref: str | None) -> str | None:
        """The id sent on the wire: the part after the first ":" of the ref."""
        if model_ref is None:
            return self.model
        _, sep, rest = model_ref.partition(":")
        return rest if sep else model_ref

    # --- one turn -------------------------------------------------------------------

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        """One request; streams when ``on_delta`` is given. Never raises."""
        model = self.model_id(model_ref)
        meta: dict[str, Any] = {
            "runtime": self.runtime_id,
            "provider": self.provider,
            "model": model,
        }
        failure = self._precheck(model, kwargs)
        if failure is not None:
            return failed(failure, **meta)
        on_delta: DeltaCallback | None = kwargs.get("on_delta")
        try:
            body = self.build_body(model or "", prompt, system_prompt, kwargs, on_delta is not None)
            budget = kwargs.get("timeout_s")
            headers = self._turn_headers(kwargs)
            outcome: RuntimeResult | TurnFailure
            if on_delta is None:
                data = await self._post_json(self.path, body, budget, headers)
                outcome = data if isinstance(data, TurnFailure) else self.parse_reply(data)
            else:
                assembler = self.stream_assembler(on_delta)
                outcome = await self._post_stream(self.path, body, budget, assembler, headers)
        except BadReply as exc:
            outcome = bad_reply_failure(self.provider, exc)
        except Unsendable as exc:
            outcome = TurnFailure(
                ErrorReason.INVALID_REQUEST.value, f"{self.provider}: {exc}", False
            )
        except Exception as exc:  # never raise from run_turn
            outcome = TurnFailure(
                ErrorReason.UNKNOWN.value, f"{self.provider}: {type(exc).__name__}: {exc}", False
            )
        if isinstance(outcome, TurnFailure):
            outcome.message = redact(outcome.message, self._secrets())
            return failed(outcome, **meta)
        for key, value in outcome.metadata.items():
            if value is not None:
                meta[key] = value
        outcome.metadata = meta
        return outcome

    def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        """Stream one turn: text, tool-call and thinking deltas, ending with ``error`` on
        failure. Built on ``run_turn(on_delta=…)``."""
        return stream_via_run_turn(self.run_turn, prompt, kwargs)

    async def aclose(self) -> None:
        """Close the pooled client; later turns fail with reason ``closed``."""
        await self._pool.aclose()

    # --- key and client -------------------------------------------------------------

    def _key(self) -> str | None:
        if self._api_key is None and self.settings.api_key_env:
            self._api_key = os.environ.get(self.settings.api_key_env) or None
        return self._api_key

    def _secrets(self) -> tuple[str | None, ...]:
        return (self._api_key, *self._extra_secrets, *self.settings.headers.values())

    def _new_client(self) -> HTTPClient:
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.update(self.auth_headers(self._key()))
        headers.update(self.settings.headers)
        return make_client(self.settings.client(headers), self._transport)

    def _turn_headers(self, options: Mapping[str, Any]) -> dict[str, str] | None:
        """Per-request auth headers when a turn brings its own ``api_key``."""
        key = options.get("api_key")
        if not key or key == self._api_key:
            return None
        self._extra_secrets.add(key)
        return self.auth_headers(key)

    def _precheck(self, model: str | None, options: Mapping[str, Any]) -> TurnFailure | None:
        """A failure known before any request: closed, no model, or no key."""
        if self._pool.closed:
            return TurnFailure(ErrorReason.CLOSED.value, f"{self.provider}: runtime closed", False)
        if not model:
            return TurnFailure(
                ErrorReason.INVALID_REQUEST.value,
                f"{self.provider}: no model given (use a model ref like "
                f"'{self.provider}:MODEL' or the runtime option `model`)",
                False,
            )
        if self._key_required and self._key() is None and not options.get("api_key"):
            return TurnFailure(
                ErrorReason.AUTH.value,
                f"{self.provider}: no API key: set {self.settings.api_key_env} "
                "or the `api_key` option",
                False,
            )
        return None

    # --- I/O ------------------------------------------------------------------------

    def _exception_failure(self, exc: BaseException, timeout: Timeouts | None) -> TurnFailure:
        if isinstance(exc, BadReply):
            return bad_reply_failure(self.provider, exc)
        read_timeout = timeout.read if timeout is not None else self.settings.read_timeout_s
        return failure_from_exception(
            exc, provider=self.provider, secrets=self._secrets(), read_timeout_s=read_timeout
        )

    def _status_failure(self, response: Reply, raw: bytes) -> TurnFailure:
        return failure_from_status(
            response.status,
            response.headers,
            raw,
            provider=self.provider,
            secrets=self._secrets(),
        )

    def _redirect_failure(self, response: Reply) -> TurnFailure:
        return failure_from_redirect(
            response.status, response.headers, provider=self.provider, secrets=self._secrets()
        )

    async def _post_json(
        self,
        path: str,
        body: dict[str, Any],
        budget_s: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | TurnFailure:
        """POST a JSON body; the decoded JSON reply, or a classified failure."""
        cap = self.settings.max_reply_bytes
        timeout = request_timeout(
            self.settings.read_timeout_s, self.settings.connect_timeout_s, budget_s
        )
        content = _JSON.encode(body).encode()
        try:
            async with self._pool.get().request(
                "POST", path, content, headers, timeout
            ) as response:
                if 300 <= response.status < 400:
                    return self._redirect_failure(response)
                raw = await read_capped(response, cap)
        except Exception as exc:
            return self._exception_failure(exc, timeout)
        if response.status >= 400:
            return self._status_failure(response, raw)
        return self._decoded(raw, response.status)

    def _decoded(self, raw: bytes, status: int) -> dict[str, Any] | TurnFailure:
        """A whole reply's JSON object, or the malformed reply it is."""
        try:
            data = parse_json(raw)
        except ValueError:
            problem = "the body is not JSON"
        else:
            if isinstance(data, dict):
                return data
            problem = "the reply is not a JSON object"
        return TurnFailure(
            ErrorReason.SERVER_ERROR.value,
            f"{self.provider}: malformed reply: {problem} (HTTP {status})",
            False,
            http_status=status,
        )

    async def _post_stream(
        self,
        path: str,
        body: dict[str, Any],
        budget_s: float | None,
        assembler: StreamAssembler,
        headers: Mapping[str, str] | None = None,
    ) -> RuntimeResult | TurnFailure:
        """POST a streaming request and feed its events to ``assembler`` until it is done."""
        cap = self.settings.max_reply_bytes
        timeout = request_timeout(
            self.settings.read_timeout_s, self.settings.connect_timeout_s, budget_s
        )
        content = _JSON.encode(body).encode()
        try:
            async with self._pool.get().request(
                "POST", path, content, headers, timeout
            ) as response:
                if 300 <= response.status < 400:
                    return self._redirect_failure(response)
                if response.status >= 400:
                    raw = await read_capped(response, cap)
                    return self._status_failure(response, raw)
                mime = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if mime == "application/json" or mime.endswith("+json"):
                    # No stream but a whole reply (a server that does not stream, or an error
                    # sent with a 200): read as one, not as a stream that never began.
                    data = self._decoded(await read_capped(response, cap), response.status)
                    outcome = data if isinstance(data, TurnFailure) else self.parse_reply(data)
                    return outcome if isinstance(outcome, TurnFailure) else assembler.whole(outcome)
                if mime == "text/html":  # a proxy's or captive portal's page: the same again
                    return TurnFailure(
                        ErrorReason.SERVER_ERROR.value,
                        f"{self.provider}: malformed reply: a stream was asked for and the "
                        f"server sent an HTML page (HTTP {response.status})",
                        False,
                        http_status=response.status,
                    )
                failure = await _feed(response, assembler, cap)
                if failure is not None:
                    return failure
        except Exception as exc:
            return self._exception_failure(exc, timeout)
        if not assembler.finished():
            return TurnFailure(
                ErrorReason.CONNECTION.value,
                f"{self.provider}: the stream ended before the turn was complete",
                True,
            )
        return assembler.result()


async def _capped(chunks: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise ReplyTooLarge(limit)
        yield chunk


async def read_capped(response: Reply, limit: int) -> bytes:
    """The whole body, refused (``ReplyTooLarge``) once it passes ``limit`` bytes."""
    headers = response.headers
    length = headers.get("content-length", "")
    if length.isdigit():
        if int(length) > limit:
            raise ReplyTooLarge(limit)
        if "content-encoding" not in headers:
            # Both clients read exactly Content-Length bytes of a body sent as is: read at
            # once, without counting chunks (the common reply, and the cheaper path). A
            # compressed body's length says nothing of what it inflates to: it is counted.
            return await response.read()
    parts = _capped(response.chunks(), limit)
    async with contextlib.aclosing(parts):
        return b"".join([chunk async for chunk in parts])


async def _feed(response: Reply, assembler: StreamAssembler, limit: int) -> TurnFailure | None:
    """Feed a stream's events to ``assembler`` until it is done or fails.

    Each generator is closed here, even when the assembler stops early: one left for the
    garbage collector is closed by a task the event loop may never run.
    """
    chunks = _capped(response.chunks(), limit)
    lines = iter_lines(chunks)
    events = iter_sse(lines)
    try:
        async for event in events:
            assembler.feed(event)
            if assembler.failure is not None:
                return assembler.failure
            if assembler.done:
                break
    finally:
        await events.aclose()
        await lines.aclose()
        await chunks.aclose()
    return None
