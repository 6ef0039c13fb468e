"""What every HTTP provider shares: failures classified for the retry loop
(``failure_from_status``, ``failure_from_exception``), an SSE line parser, ``stream_turn``
built on ``run_turn(on_delta=…)``, and the ``HTTPRuntime`` base class, which bounds every
attempt: a read timeout between bytes, a cap on the reply's size, no redirects followed.

The client itself (settings, the aiohttp and httpx clients, one pool per provider
configuration and event loop) lives in ``_transport``; its names are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from openprogram_yaml._fast_dataclass import fast_dataclass

from ..errors import ErrorReason
from ..redaction import redact
from ..runtimes.failures import classify_status, is_quota_text, retry_after_from_headers
from ..runtimes.protocol import RuntimeDelta, RuntimeResult, TurnFailure
from ..runtimes.wrapping import stream_via_run_turn
from ._shape import BadReply, ReplyTooLarge, bad_reply_failure
from ._transport import (
    DEFAULT_MAX_REPLY_BYTES,
    AiohttpClient,
    ClientPool,
    HTTPClient,
    HTTPSettings,
    HttpxClient,
    Reply,
    Timeouts,
    build_client,
    iter_lines,
    make_client,
    request_timeout,
    resolve_read_timeout,
)

if TYPE_CHECKING:
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
    "failure_from_redirect",
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


# --- failures --------------------------------------------------------------------------


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


def failure_from_redirect(
    status: int,
    headers: Mapping[str, str],
    *,
    provider: str,
    secrets: Iterable[str | None] = (),
) -> TurnFailure:
    """A 3xx reply: final, since the next attempt gets the same redirect.

    Redirects are not followed: they would carry the key to wherever ``Location`` points.
    """
    location = {k.lower(): v for k, v in headers.items()}.get("location")
    where = f"redirect to {location[:MAX_ERROR_TEXT]}" if location else "redirect with no Location"
    message = (
        f"{provider}: HTTP {status} {where}; redirects are not followed, "
        "set base_url to the address that answers"
    )
    return TurnFailure(
        ErrorReason.INVALID_REQUEST.value,
        redact(message, secrets),
        False,
        http_status=status,
    )


def failure_from_exception(
    exc: BaseException,
    *,
    provider: str,
    secrets: Iterable[str | None] = (),
    read_timeout_s: float | None = None,
) -> TurnFailure:
    """Translate an exception raised while talking to a provider.

    Timeouts and network failures are transient; anything else is reported as unknown and
    final, since it is most likely a bug rather than a flaky network. ``read_timeout_s``
    (the bound in force) lets a read timeout say how long the server was silent.
    """
    if isinstance(exc, BadReply):
        return bad_reply_failure(provider, exc)
    transient = _transient_errors()
    if isinstance(exc, transient[0]):
        reason, retryable = ErrorReason.TIMEOUT, True
    elif isinstance(exc, transient[1]):
        reason, retryable = ErrorReason.CONNECTION, True
    else:
        reason, retryable = ErrorReason.UNKNOWN, False
    detail = str(exc) or type(exc).__name__
    message = f"{provider}: {reason.value}: {type(exc).__name__}: {detail[:MAX_ERROR_TEXT]}"
    if read_timeout_s is not None and isinstance(exc, _read_timeouts()):
        message = f"{provider}: timeout: the server sent nothing for {read_timeout_s:g} s "
        message += "(read timeout)"
    return TurnFailure(reason.value, redact(message, secrets), retryable)


def _read_timeouts() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "no byte arrived in time", of the HTTP libraries loaded."""
    found: list[type[BaseException]] = []
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        found.append(httpx.ReadTimeout)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        found.append(getattr(aiohttp, "SocketTimeoutError", aiohttp.ServerTimeoutError))
    return tuple(found)


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


@fast_dataclass
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

    def decode(self, event: SSEEvent) -> dict[str, Any] | None:
        """The event's JSON object; otherwise records the failure and gives None.

        Garbage in a whole event is a malformed reply (final); garbage in an event the
        stream was cut in the middle of is a dropped connection (retried).
        """
        try:
            data = json.loads(event.data)
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
    """What the OpenAI-compatible and Anthropic runtimes share: options, key, client, I/O.

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
    #: Bare model ids (no "provider:" prefix) this runtime claims in ``supports``.
    bare_model_prefixes: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 10.0,
        max_connections: int = 200,
        provider: str | None = None,
        model: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_reply_bytes: int | None = None,
    ) -> None:
        self.provider: str = provider or self.runtime_id
        self.read_timeout_s = resolve_read_timeout(timeout_s)
        if max_reply_bytes is None:
            max_reply_bytes = DEFAULT_MAX_REPLY_BYTES
        if (
            isinstance(max_reply_bytes, bool)
            or not isinstance(max_reply_bytes, int)
            or max_reply_bytes <= 0
        ):
            raise ValueError(f"max_reply_bytes must be an integer > 0, not {max_reply_bytes!r}")
        self.max_reply_bytes = max_reply_bytes
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
            timeout_s=self.read_timeout_s,
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

    def _exception_failure(self, exc: BaseException, timeout: Timeouts | None) -> TurnFailure:
        read_timeout = timeout.read if timeout is not None else self.read_timeout_s
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
        timeout = request_timeout(self._settings, budget_s)
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            async with self._pool.get().post(path, content, headers, timeout) as response:
                if 300 <= response.status < 400:
                    return self._redirect_failure(response)
                raw = await read_capped(response, self.max_reply_bytes)
        except Exception as exc:
            return self._exception_failure(exc, timeout)
        if response.status >= 400:
            return self._status_failure(response, raw)
        try:
            data = json.loads(raw)
        except ValueError:
            problem = "the body is not JSON"
        else:
            if isinstance(data, dict):
                return data
            problem = "the reply is not a JSON object"
        return TurnFailure(
            ErrorReason.SERVER_ERROR.value,
            f"{self.provider}: malformed reply: {problem} (HTTP {response.status})",
            False,
            http_status=response.status,
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
        timeout = request_timeout(self._settings, budget_s)
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            async with self._pool.get().post(path, content, headers, timeout) as response:
                if 300 <= response.status < 400:
                    return self._redirect_failure(response)
                if response.status >= 400:
                    raw = await read_capped(response, self.max_reply_bytes)
                    return self._status_failure(response, raw)
                failure = await _feed(response, assembler, self.max_reply_bytes)
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

    def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        """Stream one turn: text, tool-call and thinking deltas, ending with ``error`` on
        failure. Built on ``run_turn(on_delta=…)``."""
        return stream_via_run_turn(self.run_turn, prompt, kwargs)

    async def run_turn(self, prompt: Any, **kwargs: Any) -> RuntimeResult:  # pragma: no cover
        raise NotImplementedError


async def _capped(chunks: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise ReplyTooLarge(limit)
        yield chunk


async def read_capped(response: Reply, limit: int) -> bytes:
    """The whole body, refused (``ReplyTooLarge``) once it passes ``limit`` bytes."""
    length = {k.lower(): v for k, v in response.headers.items()}.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ReplyTooLarge(limit)
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
