"""The types of JSON data: ``JSONValue`` (what ``json.loads`` returns) and ``JSONObject``.

One place for them, so that a value that is JSON says so instead of ``Any``; and
``parse_json``, the one way to read JSON text that came from outside.
"""

from __future__ import annotations

import json
import math
from typing import TypeAlias

__all__ = ["JSONObject", "JSONValue", "holds_text_only", "is_text", "json_equal", "parse_json"]

JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"


def parse_json(text: str | bytes) -> JSONValue:
    """``json.loads`` for text from outside the program (a flag, a file, a row, a reply):
    whatever is wrong with it is a ``json.JSONDecodeError``, which the caller already turns
    into a clear message. ``json.loads`` alone lets two out as other errors, which reached
    people as tracebacks: nesting past the interpreter's recursion limit (a
    ``RecursionError``) and an integer past ``int``'s 4,300 digits (a ``ValueError``)."""
    try:  # bytes: UTF-8, -16 or -32, as json.loads reads them
        value: JSONValue = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        shown = text if isinstance(text, str) else ""
        raise json.JSONDecodeError("nested deeper than the JSON decoder reads", shown, 0) from None
    except UnicodeDecodeError as exc:  # bytes in none of those (a ValueError too)
        raise json.JSONDecodeError("not UTF-8, UTF-16 or UTF-32 text", "", 0) from exc
    except ValueError:  # sys.get_int_max_str_digits()
        shown = text if isinstance(text, str) else ""
        raise json.JSONDecodeError(
            "a number has more digits than the JSON decoder reads", shown, 0
        ) from None
    return value


def is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text that UTF-8 (a record, a request, a reply) can carry:
    False when it holds a lone surrogate (JSON's "\\ud800", or a byte that is not UTF-8 in a
    name, an environment value or a command line, which Python keeps so)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_PLAIN = frozenset({int, bool, type(None)})


def holds_text_only(value: object, *, finite: bool = False) -> bool:
    """Whether every string in ``value``, mapping keys too, is ``is_text``, and (``finite``)
    every float is finite: what a record, a request or a reply can carry. Lists and dicts
    are walked without recursion (any depth); ASCII text is not encoded."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _PLAIN:
            continue
        if kind is str or isinstance(item, str):
            if not is_text(item):  # type: ignore[arg-type]
                return False
        elif isinstance(item, float):
            if finite and not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and not is_text(key):
                    return False
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def json_equal(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value, as JSON Schema's ``const`` sees it:
    ``true`` is not ``1`` and ``false`` is not ``0``, which Python's ``==`` takes as equal
    (a test expecting ``{urgent: false}`` passed on ``{"urgent": 0}``); ``1`` and ``1.0``
    are one number. Lists and dicts are walked without recursion (any depth)."""
    pairs = [(a, b)]
    while pairs:
        x, y = pairs.pop()
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            pairs.extend((value, y[key]) for key, value in x.items())
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            pairs.extend(zip(x, y, strict=True))
        elif isinstance(x, bool) or isinstance(y, bool):
            if x is not y:
                return False
        elif x != y:
            return False
    return True
