"""``http`` tools: one HTTP request built from templates of the tool's arguments.

The URL, query values, header values and body are templates rendered with the arguments.
The body is a template string (sent as is) or a JSON value whose string leaves are
templates; a leaf that is exactly ``{{ name }}`` keeps the argument's JSON type, so a number
stays a number.

The URL's scheme, host and port are the template's own (written out before any expression),
or one of the tool's ``hosts``: a value cannot send the request elsewhere. Every value in
the URL is percent-encoded, ``/`` included, so it stays one path segment or one query value;
``{{ repo | path }}`` keeps a value's ``/`` as segment separators. A value that would be a
``.`` or ``..`` segment is refused (see ``openprogram_yaml.safe_urls``).

What the model gets back: the parsed body when the response is JSON, else its text. A body
over ``max_bytes`` is not read further; the model sees the first part and a marker.
Non-2xx statuses (redirects included: they are not followed, so credentials never travel to
another host) are a ``ToolError`` with the status and a short excerpt of the body. Header
values are treated as secrets, and so are the values of secret-looking environment variables
the URL, query or body hold: they are blanked out of every result and error.

Requests go through the package's one production HTTP client (``providers.http_client``,
aiohttp-backed), imported when a request is first made. The client is pooled per event loop
and shared by the tools given the same ``HttpClients``; ``aclose()`` closes it. A tool
pickled (in the compile cache) keeps its configuration, not its connections.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias
from urllib.parse import urlencode, urlsplit, urlunsplit

from openprogram_yaml.errors import ToolError
from openprogram_yaml.json_types import JSONObject, JSONValue, parse_json
from openprogram_yaml.providers.http_client import (
    ClientPool,
    ClientSettings,
    HTTPClient,
    Timeouts,
    make_client,
)
from openprogram_yaml.redaction import StreamRedactor, env_secrets, redact, redact_json
from openprogram_yaml.safe_urls import UnsafeURL, build_url, check_template, parse_hosts
from openprogram_yaml.tools.base import ConfiguredTool, TextTemplate, ToolBuildError, cap_text

__all__ = ["BodyTemplate", "HttpClients", "HttpTool", "UrlTemplate"]

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_BYTES = 1_000_000
#: Characters of an error response's body shown to the model.
ERROR_EXCERPT_CHARS = 500
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Headers that describe the request rather than authorise it; their values are not secret.
_PLAIN_HEADERS = frozenset(
    {"accept", "accept-language", "accept-encoding", "content-type", "user-agent", "cache-control"}
)
_WHOLE_VARIABLE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")

#: A request body: a template, or JSON whose string leaves are templates.
BodyTemplate: TypeAlias = (
    TextTemplate
    | Mapping[str, "BodyTemplate"]
    | Sequence["BodyTemplate"]
    | int
    | float
    | bool
    | None
)


class UrlTemplate(Protocol):
    """A URL template whose ``render_url`` fences each value (``compile.url_templates``)."""

    @property
    def source(self) -> str: ...

    def render_url(self, variables: Mapping[str, object], /) -> str: ...


#: Timeouts are per request (each tool has its own); the client never follows a redirect,
#: so header credentials cannot be carried to another host.
_CLIENT_SETTINGS = ClientSettings(max_connections=100, max_keepalive_connections=20)


def HttpClients() -> ClientPool[HTTPClient]:
    """The pooled client HTTP tools share: one per event loop, closed by ``aclose()``.

    Its factory is a partial, not a lambda, so that the pool pickles (as an empty pool) with
    the compiled program that holds the tool: the compile cache keeps such programs."""
    return ClientPool(functools.partial(make_client, _CLIENT_SETTINGS))


def _render_body(body: BodyTemplate, variables: Mapping[str, object]) -> object:
    if isinstance(body, Mapping):
        return {key: _render_body(value, variables) for key, value in body.items()}
    if isinstance(body, (list, tuple)):
        return [_render_body(item, variables) for item in body]
    if body is None or isinstance(body, (bool, int, float)):
        return body
    template: TextTemplate = body  # type: ignore[assignment]  # the only other member
    whole = _WHOLE_VARIABLE.match(template.source.strip())
    if whole is not None and whole.group(1) in variables:
        return variables[whole.group(1)]
    return template.render(variables)


def _body_sources(body: BodyTemplate) -> list[str]:
    """The template texts of a body (its string leaves)."""
    if isinstance(body, Mapping):
        return [text for value in body.values() for text in _body_sources(value)]
    if isinstance(body, (list, tuple)):
        return [text for item in body for text in _body_sources(item)]
    if body is None or isinstance(body, (bool, int, float)):
        return []
    template: TextTemplate = body  # type: ignore[assignment]  # the only other member
    return [template.source]


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """Header values to blank out, longest first (a value and its credential part)."""
    found: set[str] = set()
    for name, value in headers.items():
        if name.lower() in _PLAIN_HEADERS:
            continue
        found.add(value)
        # "Bearer <token>": the token alone may be echoed back too.
        found.update(part for part in value.split() if len(part) >= 6)
    return sorted(found, key=len, reverse=True)


@dataclass(frozen=True, slots=True)
class _Rendered:
    """One request's rendered parts: a text body goes as ``content``, any other as JSON."""

    url: str
    params: dict[str, str]
    content: bytes | None = None
    json: object = None
    has_json: bool = False


def _public_url(url: str) -> str:
    """``url`` without its query and credentials, for messages (the query may carry keys)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _is_json(content_type: str) -> bool:
    mime = content_type.split(";")[0].strip().lower()
    return mime == "application/json" or mime.endswith("+json")


class HttpTool(ConfiguredTool):
    """An HTTP request as a tool. See the module docstring for what the model sees."""

    kind = "http"

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, JSONValue] | None,
        method: str,
        url: UrlTemplate,
        *,
        hosts: Sequence[str] = (),
        headers: Mapping[str, TextTemplate] | None = None,
        query: Mapping[str, TextTemplate] | None = None,
        body: BodyTemplate = None,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
        clients: ClientPool[HTTPClient] | None = None,
    ) -> None:
        super().__init__(name, description, parameters)
        self.method = method.strip().upper()
        if self.method not in METHODS:
            raise ToolBuildError(
                f"tool {name!r}: unknown HTTP method {method!r}; use one of "
                f"{', '.join(sorted(METHODS))}",
                field="method",
            )
        timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        if timeout_s <= 0:
            raise ToolBuildError(f"tool {name!r}: timeout_s must be > 0", field="timeout_s")
        if max_bytes <= 0:
            raise ToolBuildError(f"tool {name!r}: max_bytes must be > 0", field="max_bytes")
        self._hosts, bad_hosts = parse_hosts(hosts)
        if bad_hosts:
            raise ToolBuildError(f"tool {name!r}: {bad_hosts[0][1]}", field="hosts")
        self._origin, problem = check_template(url.source, hosts=self._hosts)
        if problem is not None:
            raise ToolBuildError(f"tool {name!r}: {problem[1]}", field="url")
        self.url = url
        self.headers = dict(headers or {})
        self.query = dict(query or {})
        self.body = body
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._owns_clients = clients is None
        self._clients = clients if clients is not None else HttpClients()

    def _render(self, variables: Mapping[str, object], secrets: Sequence[str]) -> _Rendered:
        """The request's parts; a template failure names the part, never a header value."""
        part = "url"
        try:
            url = build_url(self.url.render_url(variables), origin=self._origin, hosts=self._hosts)
            part = "query"
            params = {key: t.render(variables) for key, t in self.query.items()}
            part = "body"
            body = None if self.body is None else _render_body(self.body, variables)
        except UnsafeURL as exc:
            raise ToolError(f"{exc} (check the arguments that go into the URL)") from None
        except Exception as exc:  # template failures are the tool's failure, told to the model
            raise ToolError(
                f"could not build the request {part}: {redact(str(exc), secrets)}"
            ) from exc
        if isinstance(body, str):
            return _Rendered(url, params, content=body.encode("utf-8"))
        if body is not None:
            return _Rendered(url, params, json=body, has_json=True)
        return _Rendered(url, params)

    def _secrets(self, headers: Mapping[str, str]) -> list[str]:
        """What results and errors are cleaned of, longest first: the header values, and
        the values of secret-looking environment variables (``env_secrets``) that the URL,
        query or body hold (a key in the query, a bot token in the path, one in the body)."""
        written = [self.url.source, *(t.source for t in self.query.values())]
        written += _body_sources(self.body)
        found = {s for s in env_secrets() if any(s in text for text in written)}
        found.update(header_secrets(headers))
        return sorted(found, key=len, reverse=True)

    def _rendered_headers(self, variables: Mapping[str, object]) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, template in self.headers.items():
            try:
                out[key] = template.render(variables)
            except Exception as exc:
                # The message of a failed header template could quote the secret: not shown.
                raise ToolError(
                    f"could not build the request header {key!r} "
                    f"({type(exc).__name__}; its text is not shown because headers may hold "
                    "secrets)"
                ) from None
        return out

    async def _run(self, arguments: JSONObject) -> JSONValue:
        variables = self.template_variables(arguments)
        headers = self._rendered_headers(variables)
        secrets = self._secrets(headers)
        request = self._render(variables, secrets)
        # The path may hold a credential too (a bot token): blanked like the rest.
        where = redact(f"{self.method} {_public_url(request.url)}", secrets)
        try:
            async with asyncio.timeout(self.timeout_s):
                status, content_type, data, truncated = await self._send(request, headers)
        except TimeoutError:
            raise ToolError(f"{where} timed out after {self.timeout_s:g}s") from None
        except ToolError:
            raise
        except Exception as exc:  # httpx and socket errors, translated at the boundary
            detail = redact(str(exc) or type(exc).__name__, secrets)
            raise ToolError(f"{where} failed: {type(exc).__name__}: {detail}") from exc
        text = data.decode(_charset(content_type), "replace")
        if truncated:  # the cut may end in the start of a secret: held back, never shown
            text = StreamRedactor(secrets).feed(text)
        if not 200 <= status < 300:  # redacted before the cut, which could split a secret
            excerpt = cap_text(redact(text.strip(), secrets), ERROR_EXCERPT_CHARS)
            raise ToolError(f"{where} returned HTTP {status}" + (f": {excerpt}" if excerpt else ""))
        if truncated:
            return (
                f"{text}\n[truncated: the response is larger than {self.max_bytes} bytes; "
                "only the first part is shown]"
            )
        if not data:
            return f"(empty response, HTTP {status})"
        if _is_json(content_type):
            try:
                parsed: JSONValue = parse_json(text)
            except ValueError:
                pass
            else:
                return redact_json(parsed, secrets)
        return redact(text, secrets)

    async def _send(
        self, request: _Rendered, headers: dict[str, str]
    ) -> tuple[int, str, bytes, bool]:
        """Status, content type, up to ``max_bytes`` of the body, and whether it was cut."""
        url = _with_query(request.url, request.params)
        content = request.content
        if request.has_json:
            content = json.dumps(
                request.json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode()
            if not any(name.lower() == "content-type" for name in headers):
                headers = {**headers, "Content-Type": "application/json"}
        client = self._clients.get()
        timeout = Timeouts(self.timeout_s, self.timeout_s)
        async with client.request(self.method, url, content, headers, timeout) as response:
            chunks: list[bytes] = []
            size = 0
            truncated = False
            async for chunk in response.chunks():
                room = self.max_bytes - size
                if len(chunk) > room:
                    chunks.append(chunk[:room])
                    truncated = True
                    break  # leaving the block closes the response: nothing more is read
                chunks.append(chunk)
                size += len(chunk)
            return (
                response.status,
                response.headers.get("content-type", ""),
                b"".join(chunks),
                truncated,
            )

    async def aclose(self) -> None:
        """Close the pooled client, when this tool owns it (a shared one is closed by its owner)."""
        if self._owns_clients:
            await self._clients.aclose()


def _with_query(url: str, params: Mapping[str, str]) -> str:
    """``url`` with ``params`` appended to its query, form-encoded (as httpx's ``params=``)."""
    if not params:
        return url
    parts = urlsplit(url)
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query + urlencode(params), ""))


#: Text codecs of Python's that read no body: ``idna`` and ``undefined`` refuse any with
#: errors="replace", and ``punycode`` takes time growing with the square of its length
#: (a 400 kB body: 15 s, the event loop held all along).
_NOT_CHARSETS = frozenset({"idna", "punycode", "undefined"})


def _charset(content_type: str) -> str:
    """The reply's charset when Python reads it as text, else UTF-8."""
    match = re.search(r"charset=([\w.-]+)", content_type, re.IGNORECASE)
    if match is None:
        return "utf-8"
    name = match.group(1)
    try:
        "".encode(name)  # a bytes-to-bytes codec (base64, zlib …) is no text encoding
    except (LookupError, UnicodeError):
        return "utf-8"
    return "utf-8" if codecs.lookup(name).name in _NOT_CHARSETS else name
