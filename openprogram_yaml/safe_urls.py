"""URLs built from a template and values a model chose, such that the values cannot change
where the request goes or what shape it has.

An http tool's URL template is rendered with every expression's output percent-encoded and
fenced by two private-use characters (``mark`` is the template's finalize step).
``build_url`` then reads the URL's structure (scheme, host, path, query, fragment) from the
template's own text only: a value can never add a host, a port, a path segment, a query
parameter or a fragment, and a value that would be a ``.`` or ``..`` path segment is refused.

The scheme, host and port are written out in the template (``check_template`` says where
they are not), or the template names its hosts in a list the rendered origin must match.

This module imports nothing beyond the standard library: the template sandbox (for the
``path`` filter) and the http tool both use it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "EncodedText",
    "HostPattern",
    "Origin",
    "UnsafeURL",
    "build_url",
    "check_template",
    "mark",
    "parse_hosts",
    "url_path",
    "urlencode",
]

#: Fence a value's encoded text in the rendered template (Unicode private-use characters:
#: no URL holds them, and encoded values cannot, since every non-ASCII byte is escaped).
_OPEN, _CLOSE = "\ue000", "\ue001"
_MARKED = re.compile(f"{_OPEN}([^{_OPEN}{_CLOSE}]*){_CLOSE}")
_TAG = re.compile(r"\{[{%#]")
_HOST_VALUE = re.compile(r"[A-Za-z0-9.-]*")
_HOST_PATTERN = re.compile(r"(?P<host>[A-Za-z0-9*.-]+)(?::(?P<port>\d{1,5}|\*))?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UnsafeURL(ValueError):
    """A rendered URL refused: a value tried to change its origin or its shape."""


class EncodedText(str):
    """Text already encoded for a URL (what the ``urlencode`` and ``path`` filters return),
    taken as it is rather than encoded a second time."""

    __slots__ = ()


def mark(value: Any) -> str:
    """The template's finalize step: a value, percent-encoded, between the fences."""
    text = value if isinstance(value, EncodedText) else quote(str(value), safe="")
    return f"{_OPEN}{text}{_CLOSE}"


def urlencode(value: Any) -> EncodedText:
    """Jinja's ``urlencode`` for URL templates: the same, except that ``/`` is encoded too
    (a value is one path segment or one query value) and it is never encoded twice."""
    if isinstance(value, Mapping):
        pairs: Iterable[Any] = value.items()
    elif isinstance(value, str) or not isinstance(value, Iterable):
        return EncodedText(quote(str(value), safe=""))
    else:
        pairs = value
    return EncodedText(
        "&".join(f"{quote(str(k), safe='')}={quote(str(v), safe='')}" for k, v in pairs)
    )


def url_path(value: Any) -> EncodedText:
    """The ``path`` filter: a value that is several path segments (``owner/repo``). Each
    segment is encoded and ``/`` kept; ``.`` and ``..`` segments are refused."""
    segments = str(value).split("/")
    if any(segment in (".", "..") for segment in segments):
        raise UnsafeURL(
            f"refused: {str(value)[:80]!r} holds a dot-segment ('.' or '..'), which would "
            "move the request to another path"
        )
    return EncodedText("/".join(quote(segment, safe="") for segment in segments))


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a request goes: scheme, host (lower case) and port."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One entry of a tool's ``hosts``: a host glob (``*.example.com``) and a port
    (``None``: the scheme's default port; ``0``: any port)."""

    host: str
    port: int | None

    def matches(self, origin: Origin) -> bool:
        if self.port is None:
            port_ok = origin.port == _DEFAULT_PORTS.get(origin.scheme)
        else:
            port_ok = self.port in (0, origin.port)
        return port_ok and fnmatch.fnmatchcase(origin.host, self.host)


def parse_hosts(entries: Sequence[str]) -> tuple[tuple[HostPattern, ...], list[tuple[int, str]]]:
    """The patterns of a ``hosts`` list, and ``(index, problem)`` for each bad entry."""
    patterns: list[HostPattern] = []
    problems: list[tuple[int, str]] = []
    for index, entry in enumerate(entries):
        found = _HOST_PATTERN.fullmatch(entry.strip())
        if found is None:
            problems.append(
                (
                    index,
                    f"{entry!r} is not a host: write a host name or glob, with an optional "
                    "port ('api.example.com', '*.example.com:8443', '127.0.0.1:*')",
                )
            )
            continue
        port = found.group("port")
        patterns.append(
            HostPattern(
                host=found.group("host").lower(),
                port=None if port is None else 0 if port == "*" else int(port),
            )
        )
    return tuple(patterns), problems


def check_template(
    source: str, *, hosts: Sequence[HostPattern] = ()
) -> tuple[Origin | None, tuple[int, str] | None]:
    """What a URL template's own text fixes: its origin when written out in full, and the
    first problem as ``(offset, message)``.

    Without ``hosts``, the scheme, host and port must all stand before the first template
    expression, ended by ``/``, ``?`` or ``#`` (or the end of the URL). With ``hosts``, only
    the scheme must, and an origin written out must be one of them.
    """
    tag = _TAG.search(source)
    first = tag.start() if tag is not None else len(source)
    literal = source[:first]
    scheme, sep, rest = literal.partition("://")
    if not sep:
        return None, (
            first,
            "the URL must start with its scheme and host written out (http://host/… or "
            "https://host/…), not with a template expression",
        )
    if scheme.lower() not in _DEFAULT_PORTS:
        return None, (
            0,
            f"'{scheme}://' URLs are refused; an http tool only sends http:// or https:// requests",
        )
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=-1)
    if end < 0 and tag is not None:
        if hosts:
            return None, None
        return None, (
            first,
            "the URL's scheme, host and port must be written out before any template "
            "expression, so that no value can send the request elsewhere: end the host with "
            "'/' (e.g. 'https://api.example.com/{{ path }}'), or list the hosts the tool may "
            "reach in 'hosts'",
        )
    authority = rest if end < 0 else rest[:end]
    try:
        origin = _origin_of(f"{scheme}://{authority}/")
    except UnsafeURL as exc:
        return None, (len(scheme) + 3, str(exc))
    if hosts and not any(pattern.matches(origin) for pattern in hosts):
        where = f"{origin.host}:{origin.port}"
        return origin, (len(scheme) + 3, f"the URL's host {where} is not one of its 'hosts'")
    return origin, None


def _origin_of(url: str) -> Origin:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL(f"refused: the URL's host or port is not valid ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise UnsafeURL("refused: the request URL must be an http:// or https:// address")
    return Origin(scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme])


def build_url(rendered: str, *, origin: Origin | None, hosts: Sequence[HostPattern] = ()) -> str:
    """The URL a rendered template (values fenced by ``mark``) stands for.

    Raises ``UnsafeURL`` when a value would be part of the scheme, put anything but a host
    name in the host, or be a ``.``/``..`` path segment, and when the URL's origin is not
    ``origin`` (the template's own) or, with ``hosts``, matches none of them.
    """
    text, from_value = _unfence(rendered)
    scheme_end = _literal_find(text, from_value, "://", 0)
    if scheme_end < 0 or any(from_value[:scheme_end]):
        raise UnsafeURL("refused: a value may not supply the URL's scheme")
    start = scheme_end + 3
    path_at = _literal_find_any(text, from_value, "/?#", start)
    authority_end = len(text) if path_at < 0 else path_at
    for i in range(start, authority_end):
        if from_value[i] and not _HOST_VALUE.fullmatch(text[i]):
            raise UnsafeURL(
                "refused: a value in the URL's host may hold only letters, digits, '.' and "
                "'-' (no credentials, port or path)"
            )
    path_end = _literal_find_any(text, from_value, "?#", authority_end)
    _check_segments(text, from_value, authority_end, len(text) if path_end < 0 else path_end)
    actual = _origin_of(text)
    if hosts:
        if not any(pattern.matches(actual) for pattern in hosts):
            raise UnsafeURL(f"refused: {actual.host}:{actual.port} is not one of the tool's hosts")
    elif origin is not None and actual != origin:
        raise UnsafeURL(f"refused: the request would go to {actual}, not {origin}")
    return text


def _unfence(rendered: str) -> tuple[str, list[bool]]:
    """The text without fences, and for each character whether a value produced it."""
    out: list[str] = []
    from_value: list[bool] = []
    at = 0
    for found in _MARKED.finditer(rendered):
        literal = rendered[at : found.start()]
        out.append(literal)
        from_value += [False] * len(literal)
        out.append(found.group(1))
        from_value += [True] * len(found.group(1))
        at = found.end()
    out.append(rendered[at:])
    from_value += [False] * (len(rendered) - at)
    text = "".join(out)
    if _OPEN in text or _CLOSE in text:
        raise UnsafeURL("refused: the URL holds a character reserved for template values")
    return text, from_value


def _literal_find(text: str, from_value: list[bool], needle: str, start: int) -> int:
    at = text.find(needle, start)
    while at >= 0 and any(from_value[at : at + len(needle)]):
        at = text.find(needle, at + 1)
    return at


def _literal_find_any(text: str, from_value: list[bool], chars: str, start: int) -> int:
    for i in range(start, len(text)):
        if text[i] in chars and not from_value[i]:
            return i
    return -1


def _check_segments(text: str, from_value: list[bool], start: int, end: int) -> None:
    """Refuse a path segment that a value made ``.`` or ``..``: clients and servers resolve
    those, moving the request up the path."""
    seg_start = start
    for i in range(start, end + 1):
        if i < end and text[i] != "/":
            continue
        segment = text[seg_start:i]
        if any(from_value[seg_start:i]) and unquote(segment) in (".", ".."):
            raise UnsafeURL(
                f"refused: a value made the path segment {segment!r}, a dot-segment ('.' or "
                "'..') that would move the request to another path"
            )
        seg_start = i + 1
