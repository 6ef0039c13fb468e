"""Reading a provider's JSON reply defensively: what is malformed, said by its path.

A server that is not quite the one configured (a proxy, a half-compatible local server)
sends replies of the wrong shape. The wire formats read them through these accessors, so
the user is told ``choices[0].message is not an object`` instead of a Python
``AttributeError``. A missing or null field reads as empty; a field of the wrong type is a
``MalformedReply``. Such replies, and replies larger than allowed, are not retried: the
same server sends the same reply again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ErrorReason
from ..runtimes.protocol import TurnFailure

__all__ = [
    "MAX_TOKENS",
    "BadReply",
    "MalformedReply",
    "ReplyTooLarge",
    "bad_reply_failure",
    "integer",
    "list_at",
    "number_at",
    "obj",
    "obj_at",
    "optional_str_at",
    "str_at",
]


class BadReply(Exception):
    """A reply that cannot be used; the message says why."""


class MalformedReply(BadReply):
    """A reply whose JSON does not have the wire format's shape."""

    def __init__(self, path: str, expected: str) -> None:
        super().__init__(f"malformed reply: {path} is not {expected}")


class ReplyTooLarge(BadReply):
    """A reply body longer than the provider's ``max_reply_bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the reply is larger than {limit} bytes (max_reply_bytes)")


def bad_reply_failure(provider: str, exc: BadReply) -> TurnFailure:
    """The final failure for a reply that cannot be used."""
    return TurnFailure(ErrorReason.SERVER_ERROR.value, f"{provider}: {exc}", False)


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def obj(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` as an object (a null reads as empty)."""
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):  # dict: decoded JSON
        raise MalformedReply(path, "an object")
    return value


def obj_at(parent: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any]:
    """The object at ``parent[key]``; empty when missing."""
    value = parent.get(key)
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):  # dict: decoded JSON
        # The path only when it is reported: valid replies are read on every call.
        raise MalformedReply(_path(where, key), "an object")
    return value


def list_at(parent: Mapping[str, Any], key: str, where: str = "") -> list[Any]:
    """The list at ``parent[key]``; empty when missing."""
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedReply(_path(where, key), "a list")
    return value


def str_at(parent: Mapping[str, Any], key: str, where: str = "") -> str:
    """The string at ``parent[key]``; "" when missing."""
    return optional_str_at(parent, key, where) or ""


def optional_str_at(parent: Mapping[str, Any], key: str, where: str = "") -> str | None:
    """The string at ``parent[key]``, or None when missing."""
    value = parent.get(key)
    if value is None or isinstance(value, str):
        return value
    raise MalformedReply(_path(where, key), "a string")


def integer(value: Any, path: str, default: int = 0) -> int:
    """``value`` as an int (a null reads as ``default``)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedReply(path, "an integer")
    return value


#: The largest token count read from a reply: no call reads or writes a billion tokens.
MAX_TOKENS = 10**9


def number_at(parent: Mapping[str, Any], key: str, where: str = "") -> int | None:
    """A token count at ``parent[key]`` (an int, or a float some servers send), or None.

    A count below 0 or over ``MAX_TOKENS`` is malformed too: it is no count, and it would
    be added up (10**300 tokens under a batch's ``--tpm`` made the next call wait for ever;
    10**400 failed the turn with an ``OverflowError``; negative ones were shown as spent).
    """
    value = parent.get(key)
    if value is None or (type(value) is int and 0 <= value <= MAX_TOKENS):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedReply(_path(where, key), "a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise MalformedReply(_path(where, key), "a number")
    if not 0 <= value <= MAX_TOKENS:
        raise MalformedReply(_path(where, key), f"a count of tokens (0 to {MAX_TOKENS:,})")
    return int(value)
