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
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..access import LOOPBACK_NAMES, is_same_origin
from ..json_types import JSONValue, is_text

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_ITEMS",
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

#: Bodies holding more items (values in arrays and objects, and the arrays and objects
#: themselves) are refused before they are parsed: an item takes 50-100 bytes once parsed,
#: so a body at serve's cap (28 MiB) of ``[{},{},…]`` took 830 MB; a million items is more
#: than any model reads at once.
MAX_JSON_ITEMS = 1_000_000


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
_MANY = (
    f"it holds more than {MAX_JSON_ITEMS:,} items (values in arrays and objects, "
    "and the arrays and objects themselves)"
)

#: A JSON string, from its opening quote to its closing one (or the text's end: the text is
#: not known to be JSON yet, and a match that cannot fail keeps the scan linear).
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
#: The escape of a UTF-16 surrogate (``\ud800``-``\udfff``), and of a pair, which
#: ``json.loads`` joins into one character (``\ud83d\ude00``).
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_PAIR = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")


class _NotANumber(ValueError):
    """``NaN``, ``Infinity`` or a number too large for a float: no JSON value."""


def _no_constant(name: str) -> float:
    raise _NotANumber(f"not JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: Infinity by another name
        raise _NotANumber(f"not JSON: the number {shown(text)} is too large")
    return value


#: ``json.loads`` reads ``NaN`` and ``Infinity`` (and makes ``1e999`` one): a record or a
#: reply holding one is no JSON (``JSON.parse`` and other decoders refuse it).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def read_json(data: bytes | str) -> JSONValue:
    """A client's JSON; ``ValueError`` saying what is wrong: not JSON (``NaN``, ``Infinity``
    and a number past a float's range included), more than ``MAX_JSON_ITEMS`` items, nested
    deeper than ``MAX_JSON_DEPTH``, or a string holding half of a UTF-16 pair
    (``"\\ud800"``: no text, and no UTF-8 for the record or the model).

    What a body may cost is bounded by its text before it is parsed (a body at serve's cap
    of ``[{},{},…]`` is 9 million dicts), and the checks after parsing read the text, not
    every value: surrogates can only come from the text's own, or from its escapes.
    """
    try:
        # As json.loads decodes bytes (UTF-8, -16 or -32), done here to read the text.
        text = (
            data
            if isinstance(data, str)
            else data.decode(json.detect_encoding(data), "surrogatepass")
        )
    except UnicodeDecodeError:
        raise ValueError("not JSON: it is not UTF-8") from None
    brackets = text.count("[") + text.count("{")
    if _has_too_many_items(text, brackets):
        raise ValueError(_MANY)
    try:
        if text.startswith("\ufeff"):  # as json.loads says of a str
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value: JSONValue = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise ValueError(_DEEPER) from None
    except _NotANumber as exc:
        raise ValueError(str(exc)) from None
    except ValueError:  # int()'s limit on digits (sys.get_int_max_str_digits)
        raise ValueError("not JSON: a number has more digits than the JSON decoder reads") from None
    if brackets > MAX_JSON_DEPTH and _deeper_than(value, MAX_JSON_DEPTH):
        raise ValueError(_DEEPER)  # (fewer brackets, in strings or not, nest no deeper)
    if _has_lone_surrogate(text):
        raise ValueError(_HALF_PAIR)
    return value


def _has_too_many_items(text: str, brackets: int) -> bool:
    """Whether JSON ``text`` (holding ``brackets`` opening brackets, in its strings or not)
    holds more than ``MAX_JSON_ITEMS`` items: at least one for each comma and opening
    bracket outside its strings (a container of n items has n - 1 commas), counted at the
    speed of ``str.count``."""
    if len(text) <= MAX_JSON_ITEMS:
        return False  # each item takes a character at least
    if text.count(",") + brackets <= MAX_JSON_ITEMS:
        return False  # few enough even with the commas and brackets of its strings
    outside = _STRING.sub("", text)
    return outside.count(",") + outside.count("[") + outside.count("{") > MAX_JSON_ITEMS


def _has_lone_surrogate(text: str) -> bool:
    """Whether valid JSON ``text`` decodes to a string (or key) holding half of a pair."""
    if not is_text(text):
        return True  # a surrogate written as such: only a string can hold it, and alone
    if _SURROGATE.search(text) is None:
        return False
    # Every backslash left begins an escape once the escaped backslashes are gone (each
    # becomes a character that keeps its neighbours apart); the pairs json.loads joins
    # go next, from the left as it reads them: an escaped surrogate left is alone.
    escapes = _SURROGATE_PAIR.sub("", text.replace("\\\\", "_"))
    return _SURROGATE.search(escapes) is not None


def _deeper_than(value: JSONValue, limit: int) -> bool:
    """Whether JSON ``value`` nests arrays and objects deeper than ``limit``: its containers
    level by level (a loop, not recursion: the point is to survive any depth)."""
    level: list[JSONValue] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            if isinstance(item, (dict, list))
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


_SURROGATE_CHAR = re.compile("[\ud800-\udfff]")


def shown(value: str) -> str:
    """A client-sent value quoted in an error, cut short; a byte of a header that is not
    UTF-8 (which arrives as half of a surrogate pair, and would be written into the JSON
    reply as ``\\udce9``, which strict decoders refuse) shown as U+FFFD."""
    cut = value if len(value) <= 100 else value[:100] + "…"
    return cut if cut.isascii() else _SURROGATE_CHAR.sub("\ufffd", cut)


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` (``[v6]:port`` too) as (lower-case name, port); None if malformed."""
    name, sep, port = value.rpartition(":")
    if not sep or "]" in port:
        return value.lower(), None
    if not (port.isascii() and port.isdigit()) or len(port) > 5:
        return None  # (int() of 4,300 digits or more raises: a 500 it was)
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
