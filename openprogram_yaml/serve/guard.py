"""What ``serve`` refuses, decided from a request's headers and body alone.

Any web page the developer opens can send requests to 127.0.0.1, so the server answers only
requests meant for it: a ``Host`` naming this server (127.0.0.1, localhost or [::1] at its
port; DNS rebinding sends the attacker's name), no ``Origin`` or this server's own, and run
bodies declared ``application/json`` (a page cannot send that cross-site without a CORS
preflight, which is never granted). The checks know nothing of the HTTP server they guard.

Bound to a host other than loopback, the server needs a token (``--token``) on every
request; the ``Host`` check is then lifted (the names other machines use for this one cannot
be known in advance, and a rebound page can send neither the ``Authorization`` header nor
the cookie, which the browser keeps for this server's own name), and an ``Origin`` must be
the ``Host`` the request was sent to.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ..access import LOOPBACK_NAMES, is_same_origin
from ..json_types import JSONValue

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_JSON_DEPTH",
    "TOKEN_COOKIE",
    "ServeLimits",
    "media_refusal",
    "origin_refusal",
    "read_json",
    "shown",
]

LOOPBACK_HOSTS = frozenset(LOOPBACK_NAMES)

#: The cookie that carries the token for the web page (``?token=`` sets it once); the port
#: is added to its name, since a browser shares a host's cookies across its ports.
TOKEN_COOKIE = "openprogram_token"

#: Inputs nested deeper are refused: templates, schema validation and the record all
#: recurse, and about 1,000 levels crash them. Ruby's JSON parser stops at the same depth.
MAX_JSON_DEPTH = 100


@dataclass(frozen=True, slots=True)
class ServeLimits:
    """What the server accepts from its clients (``serve``'s flags)."""

    #: Host names served besides the loopback ones (at any port), e.g. behind a proxy.
    allowed_hosts: tuple[str, ...] = ()
    #: Let ``?model=`` name any model, not only those the project's agents use.
    allow_model_override: bool = False
    #: Connections served at once; more get a 503. Well under the 256 file descriptors
    #: macOS gives a process by default, leaving room for model calls and files.
    max_connections: int = 100
    #: A request must start within this (after connecting, or after the previous reply: an
    #: idle connection is closed), and its headers must then arrive within this again.
    header_timeout_s: float = 10.0
    #: A request's body must arrive within this once its headers have.
    body_timeout_s: float = 30.0


def origin_refusal(
    headers: Mapping[str, str],
    port: int,
    allowed_hosts: Collection[str],
    *,
    any_host: bool = False,
) -> tuple[int, str] | None:
    """Why a request must not be served (a page of another site, a rebound name), or None.

    ``headers`` have lower-case names (or are case-insensitive); ``allowed_hosts`` lower-case
    values, loopback names of a bound host included. ``any_host``: bound beyond loopback
    behind a token, so any ``Host`` is served and an ``Origin`` must match it.
    """
    host = headers.get("host")
    if host is None:
        return 400, "a Host header is required"
    if any_host:
        origin = headers.get("origin")
        if origin is not None and not is_same_origin(origin, host):
            return 403, (
                f"refused: a request from Origin '{shown(origin)}' (a page of another site); "
                "only this server's own origin may call it"
            )
        return None
    if not _is_own_host(host, port, allowed_hosts):
        return 403, (
            f"refused: Host '{shown(host)}' is not this server, which answers to "
            f"127.0.0.1:{port}, localhost:{port} and [::1]:{port} "
            "(serve --allow-host NAME admits another name)"
        )
    origin = headers.get("origin")
    if origin is not None and not _is_own_origin(origin, port, allowed_hosts):
        return 403, (
            f"refused: a request from Origin '{shown(origin)}' (a page of another site); "
            "only this server's own origin may call it"
        )
    return None


def media_refusal(content_type: str | None) -> str | None:
    """Why a run's body is refused for its ``Content-Type``, or None for JSON."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if media == "application/json":
        return None
    got = f"'{shown(media)}'" if media else "none"
    return f"send the inputs as a JSON object with Content-Type: application/json (got {got})"


_DEEPER = f"it nests arrays and objects deeper than {MAX_JSON_DEPTH}"
_HALF_PAIR = "a string in it holds half of a UTF-16 surrogate pair (such as \\ud800), not text"


def read_json(data: bytes | str) -> JSONValue:
    """A client's JSON; ``ValueError`` saying what is wrong: not JSON, nested deeper than
    ``MAX_JSON_DEPTH``, or a string holding half of a UTF-16 pair (``"\\ud800"``: no text,
    and no UTF-8 for the record or the model)."""
    try:
        value: JSONValue = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at character {exc.pos}") from None
    except UnicodeDecodeError:
        raise ValueError("not JSON: it is not UTF-8") from None
    except RecursionError:
        raise ValueError(_DEEPER) from None
    problem = _json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _json_problem(value: object) -> str | None:
    """Why JSON ``value`` is refused (nested deeper than ``MAX_JSON_DEPTH``, a lone
    surrogate in a string or a key), or None."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:  # a loop, not recursion: the point is to survive any depth
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and not _is_text(item):
                return _HALF_PAIR
            continue
        if isinstance(item, dict):
            children: Iterable[object] = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return _DEEPER
        stack.extend((c, depth + 1) for c in children)
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: str) -> str:
    """A client-sent value quoted in an error, cut short."""
    return value if len(value) <= 100 else value[:100] + "…"


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` (``[v6]:port`` too) as (lower-case name, port); None if malformed."""
    name, sep, port = value.rpartition(":")
    if not sep or "]" in port:
        return value.lower(), None
    if not (port.isascii() and port.isdigit()):
        return None
    return name.lower(), int(port)


def _is_own_host(
    value: str, port: int, allowed_hosts: Collection[str], *, scheme: str = "http"
) -> bool:
    found = _split_host(value)
    if found is None:
        return False
    name, asked = found
    if name in allowed_hosts:
        return True
    if name not in LOOPBACK_HOSTS or scheme != "http":
        return False
    return asked == port or (asked is None and port == 80)


def _is_own_origin(origin: str, port: int, allowed_hosts: Collection[str]) -> bool:
    scheme, sep, rest = origin.partition("://")
    if not sep or "/" in rest or scheme.lower() not in ("http", "https"):
        return False  # "null" (a sandboxed frame, a file) is nobody's own origin
    return _is_own_host(rest, port, allowed_hosts, scheme=scheme.lower())
