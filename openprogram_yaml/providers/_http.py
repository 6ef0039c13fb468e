"""The one home of the providers' HTTP client.

Everything a provider needs from HTTP lives here: one pooled client per provider
configuration and event loop (``ClientPool``), HTTP failures classified for the retry loop
(``failure_from_status``, ``failure_from_exception``), ``Retry-After`` parsing, an SSE
line parser, and ``stream_turn`` built on ``run_turn(on_delta=…)``.

The transport is chosen by measurement (DESIGN.md, benchmarks/README.md): providers talk
to servers through aiohttp's client (``AiohttpClient``), which served 1,000 concurrent
loopback runs in about 1.1x bare aiohttp's time where httpx's default transport took 12
to 45 s, and costs less per call than httpx over any transport. A runtime given an httpx
``transport=`` (``httpx.MockTransport`` in tests) talks through ``HttpxClient`` instead;
both answer the same two calls, so the providers' code has one path. ``make_client`` is
the single place that picks between them.

httpx and aiohttp are imported lazily so that ``import openprogram_yaml`` stays fast.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ipaddress
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

from ..errors import ErrorReason
from ..runtimes.failures import classify_status, is_quota_text, retry_after_from_headers
from ..runtimes.protocol import RuntimeDelta, RuntimeResult, TurnFailure

if TYPE_CHECKING:
    import aiohttp
    import httpx

__all__ = [
    "AiohttpClient",
    "ClientPool",
    "HTTPRuntime",
    "HTTPSettings",
    "HttpxClient",
    "Reply",
    "SSEEvent",
    "StreamAssembler",
    "build_client",
    "failed",
    "failure_from_body_error",
    "failure_from_exception",
    "failure_from_status",
    "image_source",
    "is_local_url",
    "iter_lines",
    "iter_sse",
    "make_client",
    "redact",
    "request_timeout",
    "stream_via_run_turn",
]

#: The longest piece of a server's error body kept in a message.
MAX_ERROR_TEXT = 500
REDACTED = "***"


@dataclass(frozen=True, slots=True)
class HTTPSettings:
    """How to build a provider's client. ``headers`` may hold secrets: never print them."""

    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_s: float | None = 600.0
    connect_timeout_s: float = 10.0
    max_connections: int = 200
    max_keepalive_connections: int = 50
    keepalive_expiry_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed to connect and between reads (and to wait for a pooled connection)."""

    connect: float | None
    read: float | None


def request_timeout(settings: HTTPSettings, budget_s: float | None) -> Timeouts | None:
    """A per-request timeout when the caller's budget is shorter than the client's."""
    if budget_s is None or (settings.timeout_s is not None and budget_s >= settings.timeout_s):
        return None
    budget_s = max(budget_s, 0.001)
    return Timeouts(min(settings.connect_timeout_s, budget_s), budget_s)


def _client_timeouts(settings: HTTPSettings) -> Timeouts:
    connect = settings.connect_timeout_s
    if settings.timeout_s is not None:
        connect = min(connect, settings.timeout_s)
    return Timeouts(connect, settings.timeout_s)


class Reply(Protocol):
    """What a provider reads from a response, whichever client fetched it."""

    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes:
        """The whole body."""
        ...

    def lines(self) -> AsyncIterator[str]:
        """The body as text lines, line endings removed (``str.splitlines`` rules)."""
        ...


class HTTPClient(Protocol):
    """The two calls providers make: one POST, read whole or as a stream."""

    def post(
        self,
        path: str,
        content: bytes,
        headers: Mapping[str, str] | None,
        timeout: Timeouts | None,
    ) -> contextlib.AbstractAsyncContextManager[Reply]: ...

    async def aclose(self) -> None: ...


def make_client(
    settings: HTTPSettings, transport: httpx.AsyncBaseTransport | None = None
) -> HTTPClient:
    """The pooled client of one provider configuration on the running loop.

    aiohttp unless an httpx ``transport`` is given (tests use ``httpx.MockTransport``).
    """
    if transport is not None:
        return HttpxClient(build_client(settings, transport))
    return AiohttpClient(settings)


def build_client(
    settings: HTTPSettings, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """An httpx client for one provider configuration (used with an explicit transport)."""
    import httpx

    timeouts = _client_timeouts(settings)
    return httpx.AsyncClient(
        base_url=settings.base_url,
        headers=dict(settings.headers),
        timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect),
        limits=httpx.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_keepalive_connections,
            keepalive_expiry=settings.keepalive_expiry_s,
        ),
        transport=transport,
        follow_redirects=False,
        trust_env=False,
    )


async def iter_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """UTF-8 text lines from a byte stream, split like ``str.splitlines`` (as httpx does)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending = ""
    async for chunk in chunks:
        text = pending + decoder.decode(chunk)
        if not text:
            continue
        lines = text.splitlines(keepends=True)
        last = lines[-1]
        # An unterminated last line waits for more; so does a "\r" that may precede "\n".
        waits = last.endswith("\r") or last.splitlines()[0] == last
        pending = lines.pop() if waits else ""
        for line in lines:
            yield line.splitlines()[0]
    text = pending + decoder.decode(b"", final=True)
    for line in text.splitlines():
        yield line


class _AiohttpReply:
    """The response of one aiohttp request, entered with ``async with`` (a plain class:
    cheaper per call than a generator-based context manager)."""

    __slots__ = ("_request", "_response", "headers", "status")

    def __init__(self, request: Any) -> None:
        self._request = request  # aiohttp's request context manager

    async def __aenter__(self) -> Reply:
        response: aiohttp.ClientResponse = await self._request.__aenter__()
        self._response = response
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._request.__aexit__(*exc_info)

    async def read(self) -> bytes:
        return await self._response.read()

    def lines(self) -> AsyncIterator[str]:
        return iter_lines(self._response.content.iter_any())


class AiohttpClient:
    """A pooled aiohttp ``ClientSession`` for one provider configuration and loop.

    Same settings as the httpx client it replaces: no redirects, no proxy variables,
    ``connect`` bounds making a connection and ``read`` each wait for data.
    """

    __slots__ = ("_session", "_timeout", "_urls")

    def __init__(self, settings: HTTPSettings) -> None:
        import aiohttp

        timeouts = _client_timeouts(settings)
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=settings.timeout_s,  # waiting for a pooled connection, as httpx's pool
            sock_connect=timeouts.connect,
            sock_read=timeouts.read,
        )
        connector = aiohttp.TCPConnector(
            limit=settings.max_connections,
            limit_per_host=0,
            keepalive_timeout=settings.keepalive_expiry_s,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=dict(settings.headers),
            timeout=self._timeout,
            trust_env=False,
        )
        self._urls: dict[str, str] = {"": settings.base_url.rstrip("/")}

    def _url(self, path: str) -> str:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = self._urls[""] + "/" + path.lstrip("/")
        return url

    def post(
        self,
        path: str,
        content: bytes,
        headers: Mapping[str, str] | None,
        timeout: Timeouts | None,
    ) -> contextlib.AbstractAsyncContextManager[Reply]:
        request_timeout = self._timeout
        if timeout is not None:
            import aiohttp

            request_timeout = aiohttp.ClientTimeout(
                total=None,
                connect=timeout.read,
                sock_connect=timeout.connect,
                sock_read=timeout.read,
            )
        return _AiohttpReply(
            self._session.post(
                self._url(path),
                data=content,
                headers=headers,
                timeout=request_timeout,
                allow_redirects=False,
            )
        )

    async def aclose(self) -> None:
        await self._session.close()

    def __del__(self) -> None:
        # Dropped without ``aclose`` (its loop ended first, or the runtime was dropped):
        # release the sockets quietly, as httpx does, instead of aiohttp's unclosed warnings.
        session = getattr(self, "_session", None)
        if session is None or session.closed:
            return
        connector = session.connector
        session.detach()
        if connector is not None:
            with contextlib.suppress(Exception):
                connector._close()


class _HttpxReply:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        return await self._response.aread()

    def lines(self) -> AsyncIterator[str]:
        return self._response.aiter_lines()


class HttpxClient:
    """An ``httpx.AsyncClient`` behind the same two calls (for an explicit transport)."""

    __slots__ = ("client",)

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @contextlib.asynccontextmanager
    async def post(
        self,
        path: str,
        content: bytes,
        headers: Mapping[str, str] | None,
        timeout: Timeouts | None,
    ) -> AsyncIterator[Reply]:
        import httpx

        request_timeout: Any = httpx.USE_CLIENT_DEFAULT
        if timeout is not None:
            request_timeout = httpx.Timeout(timeout.read, connect=timeout.connect)
        async with self.client.stream(
            "POST", path, content=content, headers=headers, timeout=request_timeout
        ) as response:
            yield _HttpxReply(response)

    async def aclose(self) -> None:
        await self.client.aclose()


class _Closeable(Protocol):
    async def aclose(self) -> None: ...


C = TypeVar("C", bound=_Closeable)


class ClientPool(Generic[C]):
    """Owns the pooled client of one runtime instance.

    A connection pool belongs to the event loop it was opened on, so a client is kept per
    loop: a caller that runs each ``exec()`` in a fresh loop (or one loop per thread) still
    gets a working client, and the common single-loop case is one identity check.
    """

    __slots__ = ("_clients", "_closed", "_current", "_factory", "_lock")

    def __init__(self, factory: Callable[[], C]) -> None:
        self._factory = factory
        # (loop, client) as one tuple: replaced in one store, so threads never see a mix.
        self._current: tuple[asyncio.AbstractEventLoop, C] | None = None
        self._clients: dict[asyncio.AbstractEventLoop, C] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def get(self) -> C:
        """The client for the running loop (created on first use)."""
        loop = asyncio.get_running_loop()
        current = self._current
        if current is not None and current[0] is loop:
            return current[1]
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                # Forget clients of loops that are gone; their sockets went with them.
                self._clients = {k: v for k, v in self._clients.items() if not k.is_closed()}
                client = self._clients[loop] = self._factory()
            self._current = (loop, client)
        return client

    async def aclose(self) -> None:
        """Close the client of the running loop and forget the others."""
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, {}
            self._current = None
        client = clients.get(asyncio.get_running_loop())
        if client is not None:
            await client.aclose()


# --- failures --------------------------------------------------------------------------


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _error_text(body: bytes | str) -> str:
    """The human part of an error body: ``error.message`` when it is JSON, else the text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:MAX_ERROR_TEXT]
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or error.get("type")
        if isinstance(message, str) and message:
            return message[:MAX_ERROR_TEXT]
    if isinstance(error, str) and error:
        return error[:MAX_ERROR_TEXT]
    return text.strip()[:MAX_ERROR_TEXT]


def failure_from_status(
    status: int,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    provider: str,
    secrets: Iterable[str | None] = (),
    now: Callable[[], float] = time.time,
) -> TurnFailure:
    """Classify an HTTP error response for the retry loop.

    401/403 auth and 400/404/413/422 invalid requests are final; 429 is a retryable rate
    limit unless the body speaks of quota or billing; 408, 409 and 5xx are retryable.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    retry_after = retry_after_from_headers(headers, now=now())
    detail = _error_text(body)
    reason, retryable = classify_status(status, text)
    message = f"{provider}: HTTP {status} {reason}"
    if detail:
        message += f": {detail}"
    if retry_after is not None and retryable:
        message += f" (retry after {retry_after:g}s)"
    return TurnFailure(
        reason=reason,
        message=redact(message, secrets),
        retryable=retryable,
        http_status=status,
        retry_after_s=retry_after if retryable else None,
    )


#: Error ``type`` values providers send inside a body or an SSE ``error`` event.
_BODY_ERROR_TYPES: dict[str, tuple[ErrorReason, bool]] = {
    "overloaded_error": (ErrorReason.SERVER_ERROR, True),
    "api_error": (ErrorReason.SERVER_ERROR, True),
    "server_error": (ErrorReason.SERVER_ERROR, True),
    "rate_limit_error": (ErrorReason.RATE_LIMIT, True),
    "rate_limit_exceeded": (ErrorReason.RATE_LIMIT, True),
    "timeout_error": (ErrorReason.TIMEOUT, True),
    "insufficient_quota": (ErrorReason.QUOTA, False),
    "billing_error": (ErrorReason.QUOTA, False),
    "authentication_error": (ErrorReason.AUTH, False),
    "permission_error": (ErrorReason.AUTH, False),
    "invalid_request_error": (ErrorReason.INVALID_REQUEST, False),
    "not_found_error": (ErrorReason.INVALID_REQUEST, False),
    "request_too_large": (ErrorReason.INVALID_REQUEST, False),
}


def failure_from_body_error(
    error: Any, *, provider: str, secrets: Iterable[str | None] = ()
) -> TurnFailure:
    """Classify an ``{"error": …}`` object sent with a 200 or inside a stream."""
    if isinstance(error, dict):
        kind = str(error.get("code") or error.get("type") or "")
        detail = str(error.get("message") or kind or "error")
        status = error.get("code") if isinstance(error.get("code"), int) else None
    else:
        kind, detail, status = "", str(error), None
    if status is not None:
        failure = failure_from_status(status, {}, json.dumps({"error": error}), provider=provider)
        failure.message = redact(failure.message, secrets)
        return failure
    reason, retryable = _BODY_ERROR_TYPES.get(kind, (ErrorReason.SERVER_ERROR, True))
    if kind not in _BODY_ERROR_TYPES and is_quota_text(detail):
        reason, retryable = ErrorReason.QUOTA, False
    message = f"{provider}: {kind or 'error'}: {detail[:MAX_ERROR_TEXT]}"
    return TurnFailure(reason.value, redact(message, secrets), retryable)


def failure_from_exception(
    exc: BaseException, *, provider: str, secrets: Iterable[str | None] = ()
) -> TurnFailure:
    """Translate an exception raised while talking to a provider.

    Timeouts and network failures are transient; anything else is reported as unknown and
    final, since it is most likely a bug rather than a flaky network.
    """
    transient = _transient_errors()
    if isinstance(exc, transient[0]):
        reason, retryable = ErrorReason.TIMEOUT, True
    elif isinstance(exc, transient[1]):
        reason, retryable = ErrorReason.CONNECTION, True
    else:
        reason, retryable = ErrorReason.UNKNOWN, False
    detail = str(exc) or type(exc).__name__
    message = f"{provider}: {reason.value}: {type(exc).__name__}: {detail[:MAX_ERROR_TEXT]}"
    return TurnFailure(reason.value, redact(message, secrets), retryable)


def _transient_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, connection failures) of the HTTP libraries in use; only loaded ones count."""
    timeouts: list[type[BaseException]] = [TimeoutError]  # aiohttp's timeouts are these
    network: list[type[BaseException]] = [ConnectionError, asyncio.IncompleteReadError]
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        timeouts.append(httpx.TimeoutException)
        network.append(httpx.TransportError)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        network += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    return tuple(timeouts), tuple(network)


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

    Blocks carry ``data`` + ``mime_type``, a ``url``, or a ``path`` read from disk.
    """
    if block.get("data"):
        return str(block.get("mime_type") or "image/png"), str(block["data"])
    if block.get("url"):
        return str(block["url"])
    path = block.get("path")
    if not path:
        return None
    import base64
    import mimetypes

    with open(path, "rb") as fh:
        data = base64.b64encode(fh.read()).decode("ascii")
    return mimetypes.guess_type(str(path))[0] or "image/png", data


# --- server-sent events ----------------------------------------------------------------


@dataclass(slots=True)
class SSEEvent:
    """One server-sent event: its ``event`` name (default "message") and ``data`` text."""

    event: str = "message"
    data: str = ""
    id: str | None = None


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[SSEEvent]:
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
        yield SSEEvent(event or "message", "\n".join(data), event_id)


# --- streaming on top of run_turn -------------------------------------------------------


async def stream_via_run_turn(
    run_turn: Callable[..., Awaitable[RuntimeResult]],
    prompt: Any,
    kwargs: dict[str, Any],
) -> AsyncIterator[RuntimeDelta]:
    """Yield a turn's deltas as ``run_turn(on_delta=…)`` produces them.

    A failed turn ends with one ``error`` delta (its ``metadata`` holds the classified
    failure); nothing is raised. Leaving the loop early cancels the turn.
    """
    queue: asyncio.Queue[RuntimeDelta | None] = asyncio.Queue()
    kwargs = dict(kwargs)
    kwargs["on_delta"] = queue.put_nowait
    task = asyncio.ensure_future(run_turn(prompt, **kwargs))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while True:
            delta = await queue.get()
            if delta is None:
                break
            yield delta
        result = task.result()
        if result.error is not None:
            failure = result.failure
            yield RuntimeDelta(
                type="error",
                content=result.error,
                metadata={
                    "reason": failure.reason if failure else ErrorReason.UNKNOWN.value,
                    "retryable": failure.retryable if failure else False,
                    "http_status": failure.http_status if failure else None,
                    "retry_after_s": failure.retry_after_s if failure else None,
                },
            )
    finally:
        if not task.done():
            task.cancel()


# --- the shared shape of an HTTP runtime ------------------------------------------------


class StreamAssembler:
    """Turns a provider's server-sent events into a ``RuntimeResult``, one event at a time."""

    provider: str = ""
    done: bool = False
    failure: TurnFailure | None = None

    def decode(self, event: SSEEvent) -> dict[str, Any] | None:
        """The event's JSON object; on garbage, records a retryable failure and gives None."""
        try:
            data = json.loads(event.data)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return data
        self.failure = TurnFailure(
            ErrorReason.SERVER_ERROR.value,
            f"{self.provider}: a stream event that is not a JSON object",
            True,
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
    """What the OpenAI-compatible and Anthropic runtimes share: options, key, client, I/O.

    Options (keyword only, all optional): ``base_url``, ``api_key``, ``api_key_env``,
    ``headers``, ``timeout_s``, ``connect_timeout_s``, ``max_connections``, ``provider``
    (the name used in errors and matched as a model-ref prefix), ``model`` (used when a
    turn names none) and ``transport`` (an ``httpx.AsyncBaseTransport``, for tests and
    benchmarks). The key is read from ``api_key``, else from the ``api_key_env`` variable
    on first use; it is only required when ``base_url`` is not a local server.
    """

    runtime_id: str = ""
    default_base_url: str = ""
    default_key_env: str = ""
    base_url_env: str = ""
    #: Bare model ids (no "provider:" prefix) this runtime claims in ``supports``.
    bare_model_prefixes: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = 600.0,
        connect_timeout_s: float = 10.0,
        max_connections: int = 200,
        provider: str | None = None,
        model: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.provider: str = provider or self.runtime_id
        self.model = model
        self.base_url = (
            base_url or (os.environ.get(self.base_url_env) if self.base_url_env else None)
        ) or self.default_base_url
        self.base_url = self.base_url.rstrip("/")
        self._api_key = api_key
        self.api_key_env = api_key_env or self.default_key_env
        self._settings = HTTPSettings(
            base_url=self.base_url,
            headers=dict(headers or {}),
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            max_connections=max_connections,
            max_keepalive_connections=min(max_connections, 100),
        )
        self._transport = transport
        self._pool: ClientPool[HTTPClient] = ClientPool(self._new_client)
        self._extra_secrets: set[str] = set()
        self.key_required = not is_local_url(self.base_url)

    # --- identity -------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, base_url={self.base_url!r})"

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

    # --- key and client -------------------------------------------------------------

    def _key(self) -> str | None:
        if self._api_key is None and self.api_key_env:
            self._api_key = os.environ.get(self.api_key_env) or None
        return self._api_key

    def _secrets(self) -> tuple[str | None, ...]:
        return (self._api_key, *self._extra_secrets, *self._settings.headers.values())

    def _auth_headers(self, key: str | None) -> dict[str, str]:  # pragma: no cover
        raise NotImplementedError

    def _new_client(self) -> HTTPClient:
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.update(self._auth_headers(self._key()))
        headers.update(self._settings.headers)
        settings = HTTPSettings(
            base_url=self._settings.base_url,
            headers=headers,
            timeout_s=self._settings.timeout_s,
            connect_timeout_s=self._settings.connect_timeout_s,
            max_connections=self._settings.max_connections,
            max_keepalive_connections=self._settings.max_keepalive_connections,
            keepalive_expiry_s=self._settings.keepalive_expiry_s,
        )
        return make_client(settings, self._transport)

    def _turn_headers(self, options: Mapping[str, Any]) -> dict[str, str] | None:
        """Per-request auth headers when a turn brings its own ``api_key``."""
        key = options.get("api_key")
        if not key or key == self._api_key:
            return None
        self._extra_secrets.add(key)
        return self._auth_headers(key)

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
        if self.key_required and self._key() is None and not options.get("api_key"):
            return TurnFailure(
                ErrorReason.AUTH.value,
                f"{self.provider}: no API key: set {self.api_key_env} or the `api_key` option",
                False,
            )
        return None

    async def aclose(self) -> None:
        """Close the pooled client; later turns fail with reason ``closed``."""
        await self._pool.aclose()

    # --- I/O ------------------------------------------------------------------------

    async def _post_json(
        self,
        path: str,
        body: dict[str, Any],
        budget_s: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | TurnFailure:
        """POST a JSON body; the decoded JSON reply, or a classified failure."""
        timeout = request_timeout(self._settings, budget_s)
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            async with self._pool.get().post(path, content, headers, timeout) as response:
                raw = await response.read()
        except Exception as exc:
            return failure_from_exception(exc, provider=self.provider, secrets=self._secrets())
        if response.status >= 400:
            return failure_from_status(
                response.status,
                response.headers,
                raw,
                provider=self.provider,
                secrets=self._secrets(),
            )
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return TurnFailure(
                ErrorReason.SERVER_ERROR.value,
                f"{self.provider}: HTTP {response.status} with a body that is not a JSON object",
                True,
                http_status=response.status,
            )
        return data

    async def _post_stream(
        self,
        path: str,
        body: dict[str, Any],
        budget_s: float | None,
        assembler: StreamAssembler,
        headers: Mapping[str, str] | None = None,
    ) -> RuntimeResult | TurnFailure:
        """POST a streaming request and feed its events to ``assembler`` until it is done."""
        timeout = request_timeout(self._settings, budget_s)
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            async with self._pool.get().post(path, content, headers, timeout) as response:
                if response.status >= 400:
                    raw = await response.read()
                    return failure_from_status(
                        response.status,
                        response.headers,
                        raw,
                        provider=self.provider,
                        secrets=self._secrets(),
                    )
                async for event in iter_sse(response.lines()):
                    assembler.feed(event)
                    if assembler.failure is not None:
                        return assembler.failure
                    if assembler.done:
                        break
        except Exception as exc:
            return failure_from_exception(exc, provider=self.provider, secrets=self._secrets())
        if not assembler.finished():
            return TurnFailure(
                ErrorReason.CONNECTION.value,
                f"{self.provider}: the stream ended before the turn was complete",
                True,
            )
        return assembler.result()

    def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        """Stream one turn: text, tool-call and thinking deltas, ending with ``error`` on
        failure. Built on ``run_turn(on_delta=…)``."""
        return stream_via_run_turn(self.run_turn, prompt, kwargs)

    async def run_turn(self, prompt: Any, **kwargs: Any) -> RuntimeResult:  # pragma: no cover
        raise NotImplementedError
