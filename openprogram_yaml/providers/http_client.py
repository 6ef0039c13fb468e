"""The package's one production HTTP client: settings, the two clients, the pool.

Providers and the ``http`` tool both talk through it. The transport is chosen by
measurement (DESIGN.md, benchmarks/README.md): aiohttp's client (``AiohttpClient``) served
1,000 concurrent loopback runs in about 1.1x bare aiohttp's time where httpx's default
transport took 12 to 45 s, and costs less per call than httpx over any transport. A provider
given an httpx ``transport=`` (``httpx.MockTransport`` in tests) talks through
``HttpxClient`` instead; both answer the same call, so callers have one path.
``make_client`` is the single place that picks between them. Neither client follows
redirects (they would carry credentials to wherever ``Location`` points) or reads proxy
variables. Both libraries are imported lazily.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    import aiohttp
    import httpx

__all__ = [
    "AiohttpClient",
    "ClientPool",
    "ClientSettings",
    "HTTPClient",
    "HttpxClient",
    "Reply",
    "Timeouts",
    "build_client",
    "iter_lines",
    "make_client",
    "request_timeout",
]


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How to build one pooled client. ``headers`` may hold secrets: never print them.

    With a ``base_url``, requests name a path under it; without one, a whole URL.
    """

    base_url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Seconds of silence allowed while waiting for (or reading) a reply.
    timeout_s: float | None = None
    connect_timeout_s: float = 10.0
    max_connections: int = 1000  # providers._http.DEFAULT_MAX_CONNECTIONS says why
    max_keepalive_connections: int = 50
    keepalive_expiry_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed to connect and between reads (and to wait for a pooled connection)."""

    connect: float | None
    read: float | None


def request_timeout(
    read_s: float | None, connect_s: float, budget_s: float | None
) -> Timeouts | None:
    """A per-request timeout when the caller's budget is shorter than the client's."""
    if budget_s is None or (read_s is not None and budget_s >= read_s):
        return None
    budget_s = max(budget_s, 0.001)
    return Timeouts(min(connect_s, budget_s), budget_s)


def _client_timeouts(settings: ClientSettings) -> Timeouts:
    connect = settings.connect_timeout_s
    if settings.timeout_s is not None:
        connect = min(connect, settings.timeout_s)
    return Timeouts(connect, settings.timeout_s)


class Reply(Protocol):
    """What a caller reads from a response, whichever client fetched it."""

    status: int
    #: Case-insensitive, as both libraries give them.
    headers: Mapping[str, str]

    def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives."""
        ...

    async def read(self) -> bytes:
        """The whole body at once: only for a body whose size is known to be small (a
        ``Content-Length`` within the caller's cap, and no ``Content-Encoding`` that could
        inflate it)."""
        ...


class HTTPClient(Protocol):
    """One request, its reply read whole or as a stream; ``target`` is a path under the
    client's ``base_url``, or a whole URL (sent as written) when it has none."""

    def request(
        self,
        method: str,
        target: str,
        content: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Timeouts | None,
    ) -> contextlib.AbstractAsyncContextManager[Reply]: ...

    async def aclose(self) -> None: ...


def make_client(
    settings: ClientSettings, transport: httpx.AsyncBaseTransport | None = None
) -> HTTPClient:
    """A pooled client for ``settings`` on the running loop.

    aiohttp unless an httpx ``transport`` is given (tests use ``httpx.MockTransport``).
    """
    if transport is not None:
        return HttpxClient(build_client(settings, transport))
    return AiohttpClient(settings)


def build_client(
    settings: ClientSettings, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """An httpx client for ``settings`` (used with an explicit transport)."""
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


#: A line break of a server-sent event stream: CRLF, a lone CR or a lone LF, nothing else.
_LINE_BREAK = re.compile(rb"\r\n?|\n")


async def iter_lines(chunks: AsyncIterator[bytes]) -> AsyncGenerator[str, None]:
    """UTF-8 text lines from a byte stream, split at CRLF, CR or LF (line ends removed).

    Only those three, as the server-sent events standard says: ``str.splitlines`` also
    splits at U+2028, U+0085 and others that JSON carries unescaped inside a string, which
    cut a streamed reply holding one into two lines of broken JSON. Each chunk is searched
    once and an unended line is kept in pieces joined once, so a long line costs its length, not
    its length times its chunks. The bytes are split before they are decoded: no byte of a
    multi-byte UTF-8 character is a CR or LF.
    """
    pending: list[bytes] = []  # the start of a line no break has ended yet, in pieces
    after_cr = False  # the last chunk ended in CR: an LF first in the next is that break's
    async for chunk in chunks:
        if not chunk:
            continue
        if after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        after_cr = chunk[-1:] == b"\r"
        first, *lines = _LINE_BREAK.split(chunk)
        if not lines:
            if first:
                pending.append(first)
            continue
        if pending:
            first = b"".join([*pending, first])
            pending.clear()
        yield first.decode("utf-8", "replace")
        last = lines.pop()
        for line in lines:
            yield line.decode("utf-8", "replace")
        if last:
            pending.append(last)
    if pending:
        yield b"".join(pending).decode("utf-8", "replace")


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

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()

    async def read(self) -> bytes:
        return await self._response.read()


class AiohttpClient:
    """A pooled aiohttp ``ClientSession`` for one configuration and loop.

    Same settings as the httpx client it replaces: no redirects, no proxy variables,
    ``connect`` bounds making a connection and ``read`` each wait for data. It adds no
    ``Content-Type`` of its own, as httpx does not.
    """

    __slots__ = ("_session", "_timeout", "_urls")

    def __init__(self, settings: ClientSettings) -> None:
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
            # Only when no Content-Type goes with every request: aiohttp's skip list
            # costs a little on each one.
            skip_auto_headers=None if _names_content_type(settings.headers) else ("Content-Type",),
        )
        base_url = settings.base_url.rstrip("/")
        self._urls: dict[str, str] | None = {"": base_url} if base_url else None

    def _url(self, target: str) -> Any:
        if self._urls is None:
            import yarl

            # As written: the http tool built and checked this URL (safe_urls); requoting
            # could turn an escaped value back into a path separator or a dot segment.
            return yarl.URL(target, encoded=True)
        url = self._urls.get(target)
        if url is None:
            url = self._urls[target] = self._urls[""] + "/" + target.lstrip("/")
        return url

    def request(
        self,
        method: str,
        target: str,
        content: bytes | None,
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
            self._session.request(
                method,
                self._url(target),
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


def _names_content_type(headers: Mapping[str, str]) -> bool:
    return any(name.lower() == "content-type" for name in headers)


class _HttpxReply:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.aiter_bytes()

    async def read(self) -> bytes:
        return await self._response.aread()


class HttpxClient:
    """An ``httpx.AsyncClient`` behind the same two calls (for an explicit transport)."""

    __slots__ = ("client",)

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        target: str,
        content: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Timeouts | None,
    ) -> AsyncIterator[Reply]:
        import httpx

        request_timeout: Any = httpx.USE_CLIENT_DEFAULT
        if timeout is not None:
            request_timeout = httpx.Timeout(timeout.read, connect=timeout.connect)
        async with self.client.stream(
            method, target, content=content, headers=headers, timeout=request_timeout
        ) as response:
            yield _HttpxReply(response)

    async def aclose(self) -> None:
        await self.client.aclose()


class _Closeable(Protocol):
    async def aclose(self) -> None: ...


C = TypeVar("C", bound=_Closeable)


class ClientPool(Generic[C]):
    """Owns the pooled client of one runtime instance (or of the http tools sharing it).

    A connection pool belongs to the event loop it was opened on, so a client is kept per
    loop: a caller that runs each ``exec()`` in a fresh loop (or one loop per thread) still
    gets a working client, and the common single-loop case is one identity check. A pool
    pickles as its factory alone (which must then pickle): the copy opens its own clients.
    """

    __slots__ = ("_clients", "_closed", "_current", "_factory", "_lock")

    def __init__(self, factory: Callable[[], C]) -> None:
        self._factory = factory
        # (loop, client) as one tuple: replaced in one store, so threads never see a mix.
        self._current: tuple[asyncio.AbstractEventLoop, C] | None = None
        self._clients: dict[asyncio.AbstractEventLoop, C] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __reduce__(self) -> tuple[Callable[..., ClientPool[C]], tuple[Callable[[], C]]]:
        # A copy (a compiled program kept on disk holds its http tools' pools) starts with
        # no client: a connection belongs to the process and the loop that opened it.
        return (type(self), (self._factory,))

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
