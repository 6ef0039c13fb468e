"""How long a text a template operation would build, known before it is built.

A template is a repository's file, and the values it renders are inputs and model output:
neither may make the runner allocate gigabytes. ``x.ljust(10**9)``, ``'%999999999s' % x``,
``'{:999999999}'.format(x)``, ``x|center(10**9)`` and ``(sep * 10**6).join(big)`` each build
their result in one step, so the sandbox (``_jinja.PromptSandbox``) asks these functions for
an upper bound first and refuses the operation when it is over ``MAX_BUILT``. Pure text
work: nothing here imports Jinja.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAX_BUILT", "format_spec_size", "printf_size", "str_method_size"]

#: No single template operation may build a text (or list) longer than this: far above any
#: prompt a model takes, far below what would exhaust the machine.
MAX_BUILT = 1 << 26

#: A number converted by ``%d``, ``%f`` … is at most this long before its width and precision
#: (a float's 309 digits), whatever ``str`` of it says (``1e+308``).
_NUMBER_SLACK = 320

_DIGITS = re.compile(r"\d+")


def _number(text: str) -> int:
    # A run of more digits than any width Python takes counts as too large, not as an error.
    return int(text) if len(text) <= 18 else MAX_BUILT + 1


def format_spec_size(spec: str) -> int:
    """The largest width or precision in a ``str.format`` spec (``>10``, ``.3f``, ``0999``)."""
    return max((_number(d) for d in _DIGITS.findall(spec)), default=0)


def _shown_size(value: Any, conversion: str) -> int:
    try:
        if conversion == "r":
            return len(repr(value))
        if conversion == "a":
            return len(ascii(value))
        text = str(value)
    except Exception:  # the formatting itself raises it, and says what it is
        return 0
    return len(text) if conversion in "sc%" else len(text) + _NUMBER_SLACK


def printf_size(fmt: str, args: Any) -> int:
    """An upper bound of ``len(fmt % args)``.

    Conversions are read as Python reads them: ``%(key)`` (a key may hold parentheses),
    flags, a width and a precision (``*`` takes the next value), one length modifier, the
    conversion character. Each adds its width, its precision and its value as shown, so a
    value named many times (``('%(a)s' * n) % {'a': big}``) counts each time.
    """
    positional: Sequence[Any] = args if isinstance(args, tuple) else (args,)
    mapping = args if isinstance(args, Mapping) else None
    taken = 0
    size = len(fmt)
    end = len(fmt)
    i = fmt.find("%")
    while 0 <= i < end - 1:
        j = i + 1
        key: str | None = None
        if fmt[j] == "(":
            depth, start = 1, j + 1
            j = start
            while j < end and depth:
                depth += {"(": 1, ")": -1}.get(fmt[j], 0)
                j += 1
            key = fmt[start : j - 1]
        while j < end and fmt[j] in "-+ #0":
            j += 1
        for part in ("width", "precision"):
            if part == "precision":
                if j >= end or fmt[j] != ".":
                    break
                j += 1
            if j < end and fmt[j] == "*":
                star = positional[taken] if taken < len(positional) else 0
                taken += 1
                size += abs(star) if isinstance(star, int) else 0
                j += 1
            else:
                digits = _DIGITS.match(fmt, j)
                if digits is not None:
                    size += _number(digits.group())
                    j = digits.end()
        if j < end and fmt[j] in "hlL":
            j += 1
        conversion = fmt[j] if j < end else "%"
        if conversion != "%":
            if key is not None:
                value = mapping.get(key) if mapping is not None else None
            else:
                value = positional[taken] if taken < len(positional) else None
                taken += 1
            size += _shown_size(value, conversion)
        i = fmt.find("%", j + 1)
    return size


def _replace_size(text: str, old: Any, new: Any, count: Any) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    found = len(text) + 1 if old == "" else text.count(old)
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(0, len(new) - len(old))


def _translate_size(text: str, table: Any) -> int:
    longest = 1
    if isinstance(table, Mapping):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
    return len(text) * max(longest, 1)


def str_method_size(text: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """An upper bound of the length of ``text.<name>(*args, **kwargs)`` for the ``str``
    methods that can build a text much longer than their inputs; ``len(text)`` for others.

    ``join`` is given its items as a list (its caller makes one of any iterable).
    """

    def arg(at: int, keyword: str, default: Any) -> Any:
        return args[at] if len(args) > at else kwargs.get(keyword, default)

    if name in ("ljust", "rjust", "center", "zfill"):
        width = arg(0, "width", 0)
        return max(len(text), width if isinstance(width, int) else 0)
    if name == "expandtabs":
        tabsize = arg(0, "tabsize", 8)
        return len(text) + text.count("\t") * (tabsize if isinstance(tabsize, int) else 0)
    if name == "replace":
        return _replace_size(text, arg(0, "old", None), arg(1, "new", None), arg(2, "count", -1))
    if name == "translate":
        return _translate_size(text, arg(0, "table", None))
    if name == "join":
        items = arg(0, "iterable", ())
        if isinstance(items, list) and items:
            return len(text) * (len(items) - 1) + sum(
                len(item) for item in items if isinstance(item, str)
            )
    return len(text)
